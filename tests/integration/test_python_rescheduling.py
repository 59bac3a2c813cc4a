"""Request rescheduling and iterative sequences, end to end (a real server, tritonclient
over gRPC), as Triton 2.51 runs them (core r24.10 IterativeSequencer; python_backend
``request.set_release_flags(TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)``):

* ``sequence_batching { iterative_sequence: true }`` accepts requests without a
  correlation ID (the scheduler gives each its own, with START);
* a rescheduled request runs again without START/END, with the same correlation ID; a
  decoupled generative model sends one response per iteration;
* a model without iterative scheduling that reschedules: Triton logs "Failed to release
  request: <text>" and never answers it (on the reference Triton 2.51 the client waits
  until its own timeout); here the same line is logged and the request fails with that
  text (INVALID_ARGUMENT) instead of hanging.

The first two behaviours were checked with these very models on the reference Triton.
"""

from __future__ import annotations

import queue
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from integration_support import running_server
from server_process import ServerProcess
from tritonclient.utils import InferenceServerException

# IN = N: N responses over N iterations, OUT = responses still to come; FLAGS and CORRID
# are the request's flags() and correlation_id() in that iteration.
GENERATIVE = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.remaining = {}

    def execute(self, requests):
        for request in requests:
            cid = request.correlation_id()
            if cid not in self.remaining:
                n = int(pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()[0])
                self.remaining[cid] = n
            self.remaining[cid] -= 1
            left = self.remaining[cid]
            response = pb_utils.InferenceResponse([
                pb_utils.Tensor("OUT", np.array([left], np.int32)),
                pb_utils.Tensor("FLAGS", np.array([request.flags()], np.int32)),
                pb_utils.Tensor("CORRID", np.array([cid], np.uint64)),
            ])
            sender = request.get_response_sender()
            if left <= 0:
                del self.remaining[cid]
                sender.send(response, flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            else:
                request.set_release_flags(pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)
                sender.send(response)
        return None
"""

GENERATIVE_CONFIG = """
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [
  { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] },
  { name: "FLAGS" data_type: TYPE_INT32 dims: [ 1 ] },
  { name: "CORRID" data_type: TYPE_UINT64 dims: [ 1 ] }
]
sequence_batching { iterative_sequence: true }
instance_group [{ kind: KIND_CPU }]
"""

# Reschedules every request once (returning None for it), then answers OUT = 2 * IN and
# the executions it took.
RESCHEDULE_ONCE = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.runs = {}

    def execute(self, requests):
        responses = []
        for request in requests:
            key = (request.correlation_id(), request.request_id())
            self.runs[key] = self.runs.get(key, 0) + 1
            if self.runs[key] == 1:
                request.set_release_flags(pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)
                responses.append(None)
                continue
            data = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("OUT", data * 2),
                pb_utils.Tensor("RUNS", np.array([self.runs.pop(key)], np.int32)),
            ]))
        return responses
"""

RESCHEDULE_CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [
  { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "RUNS" data_type: TYPE_INT32 dims: [ 1 ] }
]
instance_group [{ kind: KIND_CPU }]
"""

NO_RESCHEDULE = (
    "Request is released with TRITONSERVER_REQUEST_RELEASE_RESCHEDULE, while the model is "
    "not configured to handle such a flag."
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("rescheduling")
    models = {
        "generative": (GENERATIVE, GENERATIVE_CONFIG),
        "reschedule_once": (
            RESCHEDULE_ONCE,
            RESCHEDULE_CONFIG + "sequence_batching { iterative_sequence: true }\n",
        ),
        "reschedule_plain": (RESCHEDULE_ONCE, RESCHEDULE_CONFIG),
        "reschedule_sequence": (
            RESCHEDULE_ONCE,
            RESCHEDULE_CONFIG + "sequence_batching { }\n",
        ),
    }
    for name, (model, config) in models.items():
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "1" / "model.py").write_text(model)
        (repo / name / "config.pbtxt").write_text(config)
    with running_server([Path(repo)]) as proc:
        yield proc


def test_generative_model_responds_once_per_iteration(server: ServerProcess) -> None:
    """Two requests without a correlation ID on one stream: each gets its own sequence
    (distinct IDs), 3 and 2 responses, START in the first iteration only."""
    answers: queue.Queue[object] = queue.Queue()
    with grpcclient.InferenceServerClient(server.url) as client:
        client.start_stream(lambda result, error: answers.put(error or result))
        for n in (3, 2):
            tensor = grpcclient.InferInput("IN", [1], "INT32")
            tensor.set_data_from_numpy(np.array([n], np.int32))
            client.async_stream_infer("generative", [tensor])
        got = [answers.get(timeout=10) for _ in range(5)]
        client.stop_stream()
    by_id: dict[int, list[tuple[int, int]]] = {}
    for item in got:
        assert not isinstance(item, InferenceServerException), item
        cid = int(item.as_numpy("CORRID")[0])  # type: ignore[attr-defined]
        left = int(item.as_numpy("OUT")[0])  # type: ignore[attr-defined]
        flags = int(item.as_numpy("FLAGS")[0])  # type: ignore[attr-defined]
        by_id.setdefault(cid, []).append((left, flags))
    assert len(by_id) == 2 and 0 not in by_id
    assert sorted(by_id.values(), key=len) == [[(1, 1), (0, 0)], [(2, 1), (1, 0), (0, 0)]]


def test_rescheduled_request_answered_after_its_second_run(server: ServerProcess) -> None:
    data = np.arange(4, dtype=np.float32)
    tensor = grpcclient.InferInput("IN", [4], "FP32")
    tensor.set_data_from_numpy(data)
    with grpcclient.InferenceServerClient(server.url) as client:
        for request_id in ("a", "b"):
            result = client.infer("reschedule_once", [tensor], request_id=request_id)
            np.testing.assert_array_equal(result.as_numpy("OUT"), data * 2)
            assert result.as_numpy("RUNS").tolist() == [2]
        # A client's own sequence is served too (its START request may be rescheduled).
        result = client.infer(
            "reschedule_once", [tensor], sequence_id=42, sequence_start=True, request_id="c"
        )
        assert result.as_numpy("RUNS").tolist() == [2]


@pytest.mark.parametrize("model", ["reschedule_plain", "reschedule_sequence"])
def test_reschedule_without_iterative_sequence_fails(server: ServerProcess, model: str) -> None:
    tensor = grpcclient.InferInput("IN", [4], "FP32")
    tensor.set_data_from_numpy(np.zeros(4, np.float32))
    kwargs = {"sequence_id": 9, "sequence_start": True} if model.endswith("sequence") else {}
    with (
        grpcclient.InferenceServerClient(server.url) as client,
        pytest.raises(InferenceServerException) as caught,
    ):
        client.infer(model, [tensor], **kwargs)  # type: ignore[arg-type]
    assert caught.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert NO_RESCHEDULE in caught.value.message()
    assert f"Failed to release request: {NO_RESCHEDULE}" in server.log
