"""Python models and decoupled responses end to end, through tritonclient over gRPC."""

from __future__ import annotations

import itertools
import queue
import shutil
import time
from collections.abc import Iterator

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from server_process import REPO_ROOT, ServerProcess
from tritonclient.utils import InferenceServerException

PYTHON_MODELS = REPO_ROOT / "tests" / "python_models"

SQUARE = """name: "square"
backend: "square"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("python_repo")
    for name in ("add_sub", "stream", "faulty"):
        shutil.copytree(PYTHON_MODELS / name, repo / name)
    (repo / "square" / "1").mkdir(parents=True)
    (repo / "square" / "config.pbtxt").write_text(SQUARE)
    proc = ServerProcess([repo], extra_args=["--strict-readiness=false"]).start()
    yield proc
    assert proc.stop() == 0, proc.log


def _int_input(name: str, value: int) -> grpcclient.InferInput:
    tensor = grpcclient.InferInput(name, [1], "INT32")
    tensor.set_data_from_numpy(np.array([value], dtype=np.int32))
    return tensor


def _collect(
    url: str, model: str, inputs: list[grpcclient.InferInput], count: int
) -> list[tuple[int, bool, float]]:
    """(OUT, final flag, arrival time) of every response of one streamed request."""
    results: queue.Queue[tuple[object, object]] = queue.Queue()
    out = []
    with grpcclient.InferenceServerClient(url) as client:
        client.start_stream(callback=lambda result, error: results.put((result, error)))
        client.async_stream_infer(model, inputs, request_id="s1", enable_empty_final_response=True)
        while True:
            result, error = results.get(timeout=30)
            assert error is None, error
            response = result.get_response()  # type: ignore[attr-defined]
            final = response.parameters["triton_final_response"].bool_param
            value = int(result.as_numpy("OUT")[0]) if response.outputs else -99  # type: ignore[attr-defined]
            assert response.id == "s1"
            out.append((value, final, time.monotonic()))
            if final:
                break
        client.stop_stream()
    assert len(out) == count + 1
    return out


def test_python_model_answers_unary_requests(server: ServerProcess) -> None:
    with grpcclient.InferenceServerClient(server.url) as client:
        config = client.get_model_config("add_sub").config
        x = np.arange(4, dtype=np.float32).reshape(1, 4)
        inputs = []
        for spec in config.input:
            tensor = grpcclient.InferInput(spec.name, [1, 4], "FP32")
            tensor.set_data_from_numpy(x)
            inputs.append(tensor)
        result = client.infer("add_sub", inputs)
        values = {o.name: result.as_numpy(o.name) for o in result.get_response().outputs}
        assert sorted(v.tolist()[0] for v in values.values()) == sorted(
            [(2 * x)[0].tolist(), [0.0] * 4]
        )


def test_decoupled_python_model_streams_each_response_as_sent(server: ServerProcess) -> None:
    responses = _collect(
        server.url, "stream", [_int_input("COUNT", 4), _int_input("DELAY_MS", 150)], 4
    )
    assert [(v, f) for v, f, _ in responses] == [
        (0, False),
        (1, False),
        (2, False),
        (3, False),
        (-99, True),
    ]
    gaps = [b[2] - a[2] for a, b in itertools.pairwise(responses[:4])]
    assert min(gaps) > 0.08, f"responses were buffered, not streamed: gaps {gaps}"


def test_builtin_square_sends_n_responses(server: ServerProcess) -> None:
    responses = _collect(server.url, "square", [_int_input("IN", 3)], 3)
    assert [(v, f) for v, f, _ in responses] == [(3, False), (3, False), (3, False), (-99, True)]


def test_unary_call_to_decoupled_model_is_refused(server: ServerProcess) -> None:
    """As Triton: a decoupled model needs a stream, even when it would send one response."""
    with grpcclient.InferenceServerClient(server.url) as client:
        for count in (1, 3):
            with pytest.raises(InferenceServerException) as info:
                client.infer("square", [_int_input("IN", count)])
            assert info.value.status() == "StatusCode.UNIMPLEMENTED"
            assert info.value.message() == (
                "ModelInfer RPC doesn't support models with decoupled transaction policy"
            )


def test_response_statistics_per_index(server: ServerProcess) -> None:
    with grpcclient.InferenceServerClient(server.url) as client:
        before = client.get_inference_statistics("square").model_stats[0]
        _collect(server.url, "square", [_int_input("IN", 2)], 2)
        after = client.get_inference_statistics("square").model_stats[0]

    def count(stats: object, key: str, field: str) -> int:
        entry = stats.response_stats.get(key)  # type: ignore[attr-defined]
        return getattr(entry, field).count if entry is not None else 0

    assert count(after, "0", "success") - count(before, "0", "success") == 1
    assert count(after, "1", "success") - count(before, "1", "success") == 1
    assert count(after, "2", "empty_response") - count(before, "2", "empty_response") == 1


def test_cancelled_stream_stops_the_model_and_server_keeps_serving(server: ServerProcess) -> None:
    results: queue.Queue[tuple[object, object]] = queue.Queue()
    with grpcclient.InferenceServerClient(server.url) as client:
        client.start_stream(callback=lambda result, error: results.put((result, error)))
        client.async_stream_infer(
            "stream", [_int_input("COUNT", 50), _int_input("DELAY_MS", 50)], request_id="c"
        )
        _, error = results.get(timeout=30)
        assert error is None
        client.stop_stream(cancel_requests=True)
        before = client.get_inference_statistics("stream").model_stats[0]
    time.sleep(0.3)
    responses = _collect(server.url, "square", [_int_input("IN", 2)], 2)
    assert [v for v, _, _ in responses[:2]] == [2, 2]
    assert before.name == "stream"


def _mode(value: int) -> list[grpcclient.InferInput]:
    tensor = grpcclient.InferInput("MODE", [1, 1], "INT32")
    tensor.set_data_from_numpy(np.array([[value]], dtype=np.int32))
    return [tensor]


def test_error_and_crash_fail_only_their_requests(server: ServerProcess) -> None:
    with grpcclient.InferenceServerClient(server.url) as client:
        pid = int(client.infer("faulty", _mode(0)).as_numpy("PID")[0, 0])
        with pytest.raises(InferenceServerException, match="MODE 1 asks execute to raise"):
            client.infer("faulty", _mode(1))
        with pytest.raises(InferenceServerException, match="faulty"):
            client.infer("faulty", _mode(3))  # the worker process dies
        restarted = int(client.infer("faulty", _mode(0)).as_numpy("PID")[0, 0])
        assert restarted != pid  # a new worker took over
    responses = _collect(server.url, "square", [_int_input("IN", 1)], 1)
    assert [v for v, _, _ in responses] == [1, -99]
