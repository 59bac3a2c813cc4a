"""Python models' response sender, error codes, cancellation and the gRPC stream error mode,
end to end (a real server, tritonclient over gRPC), as Triton's python backend behaves
(python_backend r24.10: response_sender.cc, pb_stub.cc; Triton's grpc stream handler)."""

from __future__ import annotations

import queue
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from server_process import ServerProcess
from tritonclient.utils import InferenceServerException

# PRE responses (ids 1000+) then the final flag if PRE_FINAL, before execute returns; a
# returned response (id 0) if RET; POST responses (2000+) then the final flag if
# POST_FINAL, from a thread 0.3 s after execute returned.
SENDER_MODEL = """
import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils


def _get(request, name):
    return int(pb_utils.get_input_tensor_by_name(request, name).as_numpy().sum())


def _response(i, shape):
    return pb_utils.InferenceResponse([pb_utils.Tensor("INDEX", np.full(shape, i, np.uint16))])


def _send(sender, count, final, offset, shape):
    for i in range(count):
        sender.send(_response(offset + i, shape))
    if final:
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)


class TritonPythonModel:
    def execute(self, requests):
        later, returned = [], []
        for request in requests:
            sender = request.get_response_sender()
            shape = pb_utils.get_input_tensor_by_name(request, "PRE").as_numpy().shape
            _send(sender, _get(request, "PRE"), _get(request, "PRE_FINAL"), 1000, shape)
            later.append((sender, _get(request, "POST"), _get(request, "POST_FINAL"), shape))
            returned.append(_response(0, shape) if _get(request, "RET") else None)

        def post():
            time.sleep(0.3)
            for sender, count, final, shape in later:
                _send(sender, count, final, 2000, shape)

        threading.Thread(target=post, daemon=True).start()
        return None if returned == [None] * len(requests) else returned
"""

SENDER_CONFIG = """
backend: "python"
max_batch_size: 0
input [
  { name: "PRE" data_type: TYPE_UINT8 dims: [ 1 ] },
  { name: "PRE_FINAL" data_type: TYPE_BOOL dims: [ 1 ] },
  { name: "RET" data_type: TYPE_BOOL dims: [ 1 ] },
  { name: "POST" data_type: TYPE_UINT8 dims: [ 1 ] },
  { name: "POST_FINAL" data_type: TYPE_BOOL dims: [ 1 ] }
]
output [ { name: "INDEX" data_type: TYPE_UINT16 dims: [ 1 ] } ]
instance_group [{ kind: KIND_CPU }]
"""

# One execution with several requests: the dynamic batcher waits 0.5 s to group them.
BATCHED_CONFIG = (
    SENDER_CONFIG.replace("max_batch_size: 0", "max_batch_size: 8")
    + "dynamic_batching { max_queue_delay_microseconds: 500000 }\n"
)

ERROR_CODE_MODEL = """
import triton_python_backend_utils as pb_utils

CODES = {n: getattr(pb_utils.TritonError, n) for n in (
    "UNKNOWN", "INTERNAL", "NOT_FOUND", "INVALID_ARG", "UNAVAILABLE", "UNSUPPORTED",
    "ALREADY_EXISTS", "CANCELLED")}


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            name = pb_utils.get_input_tensor_by_name(request, "CODE").as_numpy()[0]
            name = name.decode() if isinstance(name, bytes) else str(name)
            if name == "OK":
                out = pb_utils.Tensor("OUT", pb_utils.get_input_tensor_by_name(
                    request, "CODE").as_numpy())
                responses.append(pb_utils.InferenceResponse([out]))
            else:
                error = pb_utils.TritonError("error code: " + name, CODES[name])
                responses.append(pb_utils.InferenceResponse(error=error))
        return responses
"""

ERROR_CODE_CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "CODE" data_type: TYPE_STRING dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_STRING dims: [ 1 ] } ]
"""

CANCEL_MODEL = """
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        (request,) = requests
        for step in range(100):
            time.sleep(0.1)
            if request.is_cancelled():
                pb_utils.Logger.log_info(f"[cancel_probe] cancelled after step {step}")
                error = pb_utils.TritonError("cancelled", pb_utils.TritonError.CANCELLED)
                return [pb_utils.InferenceResponse(error=error)]
        pb_utils.Logger.log_info("[cancel_probe] never cancelled")
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.zeros(1, np.float32))])]
"""

CANCEL_CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
"""


def _write(repo: Path, name: str, model: str, config: str) -> None:
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "1" / "model.py").write_text(model)
    (repo / name / "config.pbtxt").write_text(f'name: "{name}"\n' + config)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("sender_repo")
    decoupled = "model_transaction_policy { decoupled: true }\n"
    _write(repo, "sender", SENDER_MODEL, SENDER_CONFIG)
    _write(repo, "sender_decoupled", SENDER_MODEL, SENDER_CONFIG + decoupled)
    _write(repo, "sender_decoupled_batched", SENDER_MODEL, BATCHED_CONFIG + decoupled)
    _write(repo, "sender_batched", SENDER_MODEL, BATCHED_CONFIG)
    _write(repo, "error_code", ERROR_CODE_MODEL, ERROR_CODE_CONFIG)
    _write(repo, "cancel_probe", CANCEL_MODEL, CANCEL_CONFIG)
    proc = ServerProcess([repo]).start()
    yield proc
    assert proc.stop() == 0, proc.log


def _inputs(
    pre: int = 0,
    pre_final: bool = False,
    ret: bool = False,
    post: int = 0,
    post_final: bool = False,
    batched: bool = False,
) -> list[grpcclient.InferInput]:
    values = {
        "PRE": pre,
        "PRE_FINAL": pre_final,
        "RET": ret,
        "POST": post,
        "POST_FINAL": post_final,
    }
    shape = [1, 1] if batched else [1]
    tensors = []
    for name, value in values.items():
        dtype = np.uint8 if name in ("PRE", "POST") else np.bool_
        tensor = grpcclient.InferInput(name, shape, "UINT8" if dtype is np.uint8 else "BOOL")
        tensor.set_data_from_numpy(np.full(shape, value, dtype=dtype))
        tensors.append(tensor)
    return tensors


def _stream(url: str, model: str, requests: list[list[grpcclient.InferInput]]) -> list[object]:
    """Every callback of one stream (results and errors) once the stream ended: stop_stream
    returns only when every request got its final response."""
    got: list[object] = []
    with grpcclient.InferenceServerClient(url) as client:
        client.start_stream(callback=lambda result, error: got.append(error or result))
        for inputs in requests:
            client.async_stream_infer(model, inputs)
        client.stop_stream()
    return got


def _ids(items: list[object]) -> list[int]:
    assert all(not isinstance(i, InferenceServerException) for i in items), items
    return sorted(int(r.as_numpy("INDEX").flat[0]) for r in items)  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"pre_final": True}, []),  # zero responses, then the final flag, in execute
        ({"post_final": True}, []),  # ... after execute returned
        ({"pre": 2, "pre_final": True}, [1000, 1001]),
        ({"post": 2, "post_final": True}, [2000, 2001]),  # sent after execute returned
        ({"pre": 1, "post": 3, "post_final": True}, [1000, 2000, 2001, 2002]),
    ],
)
def test_decoupled_requests_complete(server: ServerProcess, kwargs: dict, expected: list) -> None:
    assert _ids(_stream(server.url, "sender_decoupled", [_inputs(**kwargs)])) == expected


def test_decoupled_several_requests_in_one_execute(server: ServerProcess) -> None:
    requests = [
        _inputs(pre_final=True, batched=True),
        _inputs(post_final=True, batched=True),
        _inputs(pre=1, pre_final=True, batched=True),
        _inputs(post=2, post_final=True, batched=True),
        _inputs(pre=1, post=1, post_final=True, batched=True),
    ]
    started = time.monotonic()
    got = _stream(server.url, "sender_decoupled_batched", requests)
    assert _ids(got) == [1000, 1000, 2000, 2000, 2001]
    assert time.monotonic() - started < 10
    assert "Failed to process" not in server.log


def test_decoupled_execute_must_return_none(server: ServerProcess) -> None:
    (error,) = _stream(server.url, "sender_decoupled", [_inputs(ret=True)])
    assert isinstance(error, InferenceServerException)
    assert (
        "Python model 'sender_decoupled_0_0' is using the decoupled mode and the execute "
        "function must return None." in error.message()
    )
    # a response already closed by the final flag: the error reaches nobody
    got = _stream(server.url, "sender_decoupled", [_inputs(pre=1, pre_final=True, ret=True)])
    assert _ids(got) == [1000]


def test_non_decoupled_response_sent_after_execute_returned(server: ServerProcess) -> None:
    with grpcclient.InferenceServerClient(server.url) as client:
        result = client.infer("sender", _inputs(post=1, post_final=True))
        assert result.as_numpy("INDEX").tolist() == [2000]
        result = client.infer("sender", _inputs(pre=1, pre_final=True))
        assert result.as_numpy("INDEX").tolist() == [1000]
        result = client.infer("sender", _inputs(ret=True))
        assert result.as_numpy("INDEX").tolist() == [0]
    # several requests of one execution, each answered its own way
    got = _stream(
        server.url,
        "sender_batched",
        [
            _inputs(ret=True, batched=True),
            _inputs(pre=1, pre_final=True, batched=True),
            _inputs(post=1, post_final=True, batched=True),
        ],
    )
    assert _ids(got) == [0, 1000, 2000]


def test_non_decoupled_sender_misuse_has_tritons_texts(server: ServerProcess) -> None:
    with grpcclient.InferenceServerClient(server.url) as client:
        with pytest.raises(InferenceServerException) as caught:
            client.infer("sender", _inputs(pre_final=True))
        assert (
            "Non-decoupled model cannot send complete final before sending a response"
            in caught.value.message()
        )
        # a second response raises in the model; the client has the first one
        result = client.infer("sender", _inputs(pre=2, pre_final=True))
        assert result.as_numpy("INDEX").tolist() == [1000]


@pytest.mark.parametrize(
    ("code", "status"),
    [
        ("UNKNOWN", "StatusCode.UNKNOWN"),
        ("INTERNAL", "StatusCode.INTERNAL"),
        ("NOT_FOUND", "StatusCode.NOT_FOUND"),
        ("INVALID_ARG", "StatusCode.INVALID_ARGUMENT"),
        ("UNAVAILABLE", "StatusCode.UNAVAILABLE"),
        ("UNSUPPORTED", "StatusCode.UNIMPLEMENTED"),
        ("ALREADY_EXISTS", "StatusCode.ALREADY_EXISTS"),
        ("CANCELLED", "StatusCode.CANCELLED"),
    ],
)
def test_triton_error_code_is_the_grpc_status(
    server: ServerProcess, code: str, status: str
) -> None:
    tensor = grpcclient.InferInput("CODE", [1], "BYTES")
    tensor.set_data_from_numpy(np.array([code.encode()], dtype=np.object_))
    with (
        grpcclient.InferenceServerClient(server.url) as client,
        pytest.raises(InferenceServerException) as caught,
    ):
        client.infer("error_code", [tensor])
    assert caught.value.status() == status
    assert caught.value.message() == f"error code: {code}"


def test_request_is_cancelled_turns_true_when_the_client_cancels(server: ServerProcess) -> None:
    tensor = grpcclient.InferInput("IN", [1], "FP32")
    tensor.set_data_from_numpy(np.zeros(1, np.float32))
    answers: queue.Queue[object] = queue.Queue()
    with grpcclient.InferenceServerClient(server.url) as client:
        future = client.async_infer(
            "cancel_probe", [tensor], lambda result, error: answers.put(error or result)
        )
        time.sleep(1.0)
        future.cancel()
        error = answers.get(timeout=10)
    assert isinstance(error, InferenceServerException)
    assert error.status() == "StatusCode.CANCELLED"
    deadline = time.monotonic() + 10
    while "[cancel_probe]" not in server.log and time.monotonic() < deadline:
        time.sleep(0.1)
    assert "[cancel_probe] cancelled after step" in server.log


def test_triton_grpc_error_mode_ends_the_stream_with_the_status(server: ServerProcess) -> None:
    def code(name: str) -> list[grpcclient.InferInput]:
        tensor = grpcclient.InferInput("CODE", [1], "BYTES")
        tensor.set_data_from_numpy(np.array([name.encode()], dtype=np.object_))
        return [tensor]

    got: queue.Queue[object] = queue.Queue()
    client = grpcclient.InferenceServerClient(server.url)
    try:
        client.start_stream(
            callback=lambda result, error: got.put(error or result),
            headers={"triton_grpc_error": "true"},
        )
        client.async_stream_infer("error_code", code("OK"))
        assert got.get(timeout=10).as_numpy("OUT").tolist() == [b"OK"]  # type: ignore[attr-defined]
        client.async_stream_infer("error_code", code("UNAVAILABLE"))
        error = got.get(timeout=10)
        assert isinstance(error, InferenceServerException)
        assert error.status() == "StatusCode.UNAVAILABLE"
        assert error.message() == "error code: UNAVAILABLE"
        # the stream is over: a request sent now gets no answer
        with pytest.raises((queue.Empty, InferenceServerException)):
            client.async_stream_infer("error_code", code("OK"))
            got.get(timeout=2)
    finally:
        client.stop_stream()
        client.close()
    # without the header the stream goes on after an in-band error
    items = _stream_codes(server.url, [code("INTERNAL"), code("OK")])
    assert isinstance(items[0], InferenceServerException)
    assert items[0].message() == "error code: INTERNAL"  # in-band: a message, no status
    assert items[1].as_numpy("OUT").tolist() == [b"OK"]  # type: ignore[attr-defined]


def _stream_codes(url: str, requests: list[list[grpcclient.InferInput]]) -> list[object]:
    got: queue.Queue[object] = queue.Queue()
    with grpcclient.InferenceServerClient(url) as client:
        client.start_stream(callback=lambda result, error: got.put(error or result))
        items = []
        for inputs in requests:
            client.async_stream_infer("error_code", inputs)
            items.append(got.get(timeout=10))
        client.stop_stream()
    return items
