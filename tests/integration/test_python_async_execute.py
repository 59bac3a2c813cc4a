"""``async def execute`` on one Python model instance, end to end, as Triton 2.51 runs it
(python_backend r24.10, ``Stub::ProcessRequests`` / ``Stub::RunCoroutine``):

* decoupled: the coroutine runs in the background on the stub's event loop; the instance
  takes the next batch at once, so requests overlap and each one's responses arrive when
  its own coroutine completes (qa/L0_backend_python/async_execute);
* non-decoupled: the stub waits for ``future.result()`` before it reports the execution,
  so one instance runs one coroutine at a time (measured on the reference Triton 2.51 with
  three 2 s requests on one instance: latencies 2.0, 4.0, 6.0 s; the same here);
* a decoupled coroutine awaiting ``async_exec(decoupled=True)``: the executor thread waits
  for the first BLS response (Triton's ``InferRequest::Exec``), not the event loop, so
  several such requests overlap too (qa's ``test_concurrent_execute_multi_request_bls``).
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from integration_support import running_server
from server_process import ServerProcess

# Sleeps WAIT seconds (on the event loop) and answers with TAG.
MODEL = """
import asyncio

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        import json
        config = json.loads(args["model_config"])
        self.decoupled = pb_utils.using_decoupled_model_transaction_policy(config)

    async def execute(self, requests):
        waits = [float(pb_utils.get_input_tensor_by_name(r, "WAIT").as_numpy()[0])
                 for r in requests]
        await asyncio.gather(*(asyncio.sleep(w) for w in waits))
        responses = []
        for request in requests:
            tag = pb_utils.get_input_tensor_by_name(request, "TAG").as_numpy()
            response = pb_utils.InferenceResponse([pb_utils.Tensor("OUT", tag)])
            if self.decoupled:
                request.get_response_sender().send(
                    response, flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            responses.append(response)
        return None if self.decoupled else responses
"""

# Decoupled: forwards each response of one decoupled BLS call to 'async_decoupled'.
BLS_MODEL = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    async def execute(self, requests):
        for request in requests:
            call = pb_utils.InferenceRequest(
                model_name="async_decoupled",
                inputs=[pb_utils.get_input_tensor_by_name(request, n) for n in ("WAIT", "TAG")],
                requested_output_names=["OUT"],
            )
            sender = request.get_response_sender()
            for answer in await call.async_exec(decoupled=True):
                if answer.has_error():
                    raise pb_utils.TritonModelException(answer.error().message())
                out = pb_utils.get_output_tensor_by_name(answer, "OUT")
                if out is not None:
                    sender.send(pb_utils.InferenceResponse([out]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""

CONFIG = """
backend: "python"
max_batch_size: 0
input [
  { name: "WAIT" data_type: TYPE_FP32 dims: [ 1 ] },
  { name: "TAG" data_type: TYPE_INT32 dims: [ 1 ] }
]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
instance_group [{ kind: KIND_CPU count: 1 }]
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("async_execute")
    decoupled = "model_transaction_policy { decoupled: true }\n"
    for name, model, extra in (
        ("async_plain", MODEL, ""),
        ("async_decoupled", MODEL, decoupled),
        ("async_bls_decoupled", BLS_MODEL, decoupled),
    ):
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "1" / "model.py").write_text(model)
        (repo / name / "config.pbtxt").write_text(CONFIG + extra)
    with running_server([Path(repo)]) as proc:
        yield proc


def _inputs(wait: float, tag: int) -> list[grpcclient.InferInput]:
    w = grpcclient.InferInput("WAIT", [1], "FP32")
    w.set_data_from_numpy(np.array([wait], np.float32))
    t = grpcclient.InferInput("TAG", [1], "INT32")
    t.set_data_from_numpy(np.array([tag], np.int32))
    return [w, t]


def test_decoupled_coroutines_overlap_on_one_instance(server: ServerProcess) -> None:
    """Four 1.5 s requests end together in about 1.5 s, not 6 s; a shorter one sent
    later comes back first."""
    answers: queue.Queue[tuple[int, float]] = queue.Queue()

    def callback(result: object, error: object) -> None:
        assert error is None, error
        answers.put((int(result.as_numpy("OUT")[0]), time.monotonic()))  # type: ignore[attr-defined]

    with grpcclient.InferenceServerClient(server.url) as client:
        client.start_stream(callback)
        start = time.monotonic()
        for tag in range(4):
            client.async_stream_infer("async_decoupled", _inputs(1.5, tag))
        client.async_stream_infer("async_decoupled", _inputs(0.2, 99))
        got = [answers.get(timeout=10) for _ in range(5)]
        client.stop_stream()
    assert got[0][0] == 99
    assert sorted(tag for tag, _ in got[1:]) == [0, 1, 2, 3]
    assert got[-1][1] - start < 3.5, got


def test_decoupled_coroutines_awaiting_decoupled_bls_overlap(server: ServerProcess) -> None:
    """Three 4 s requests 0.25 s apart, each awaiting a decoupled BLS call to
    'async_decoupled' on one instance, all answer after about 4.5 s. With the event loop
    blocked in the first one's response iterator, the others would start only after it
    (8 s and more)."""
    answers: queue.Queue[tuple[int, float]] = queue.Queue()
    errors: list[object] = []

    def callback(result: object, error: object) -> None:
        if error is not None:
            errors.append(error)
            return
        answers.put((int(result.as_numpy("OUT")[0]), time.monotonic()))  # type: ignore[attr-defined]

    with grpcclient.InferenceServerClient(server.url) as client:
        client.start_stream(callback)
        start = time.monotonic()
        for tag in range(3):
            # Spaced out, so the later ones arrive while the first waits for its answer.
            time.sleep(0.25 if tag else 0.0)
            client.async_stream_infer("async_bls_decoupled", _inputs(4.0, tag))
        got = [answers.get(timeout=30) for _ in range(3)]
        client.stop_stream()
    assert not errors, errors
    assert sorted(tag for tag, _ in got) == [0, 1, 2]
    assert got[-1][1] - start < 6.5, [t - start for _, t in got]


def test_non_decoupled_coroutines_run_one_at_a_time(server: ServerProcess) -> None:
    """As Triton's stub: ``future.result()`` before the next batch; every request is
    answered (none times out), the n-th after about n x 1 s."""
    latencies: dict[int, float] = {}

    def one(tag: int) -> None:
        with grpcclient.InferenceServerClient(server.url) as client:
            began = time.monotonic()
            result = client.infer("async_plain", _inputs(1.0, tag))
            assert int(result.as_numpy("OUT")[0]) == tag
            latencies[tag] = time.monotonic() - began

    threads = [threading.Thread(target=one, args=(tag,)) for tag in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=20)
    ordered = sorted(latencies.values())
    assert len(ordered) == 3, latencies
    assert ordered[0] < 1.9 and ordered[1] > 1.8 and ordered[2] > 2.8, ordered
