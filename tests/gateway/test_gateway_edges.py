"""HTTP edge cases Triton's own tests pin, over real HTTP to a real gateway and service:
raw binary bodies, ``Transfer-Encoding: chunked`` with ``Content-Length``,
``Expect: 100-continue``, and the generate endpoints' keys, ids and error forms.

The repository is written at test time: ONNX identity models, and two small
Python-backend models for generate (skipped when the service cannot load them).
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from conftest import running_gateway
from gateway_process import GatewayProcess, Reply, http_request
from models import identity_model, make_config, write_model
from server_process import ServerProcess

LLM_CONFIG = """
name: "llm"
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [
  { name: "PROMPT" data_type: TYPE_STRING dims: [ 1, 1 ] },
  { name: "STREAM" data_type: TYPE_BOOL dims: [ 1, 1 ] },
  { name: "FAIL_AFTER" data_type: TYPE_INT32 dims: [ 1 ] optional: true }
]
output [ { name: "TEXT" data_type: TYPE_STRING dims: [ 1, -1 ] } ]
"""

# Echoes PROMPT; with FAIL_AFTER = n, sends n responses and then an error response.
LLM_MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            prompt = pb_utils.get_input_tensor_by_name(request, "PROMPT").as_numpy()
            fail = pb_utils.get_input_tensor_by_name(request, "FAIL_AFTER")
            out = pb_utils.InferenceResponse([pb_utils.Tensor("TEXT", prompt)])
            if fail is None:
                sender.send(out, flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
                continue
            for _ in range(int(fail.as_numpy()[0])):
                sender.send(out)
            error = pb_utils.InferenceResponse(error=pb_utils.TritonError("An Error Occurred"))
            sender.send(error, flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    repo: Path = tmp_path_factory.mktemp("edges_repo")
    write_model(
        repo,
        "fp32_one",
        identity_model("FP32", ["batch", None]),
        make_config(
            "fp32_one", [("INPUT0", "FP32", [-1])], [("OUTPUT0", "FP32", [-1])], max_batch_size=8
        ),
    )
    write_model(
        repo,
        "fp16_two_var",
        identity_model("FP16", [None, None]),
        make_config(
            "fp16_two_var", [("INPUT0", "FP16", [-1, -1])], [("OUTPUT0", "FP16", [-1, -1])]
        ),
    )
    write_model(
        repo,
        "bytes_one",
        identity_model("BYTES", [1]),
        make_config("bytes_one", [("INPUT0", "BYTES", [1])], [("OUTPUT0", "BYTES", [1])]),
    )
    write_model(
        repo,
        "bytes_var",
        identity_model("BYTES", [None]),
        make_config("bytes_var", [("INPUT0", "BYTES", [-1])], [("OUTPUT0", "BYTES", [-1])]),
    )
    (repo / "llm" / "1").mkdir(parents=True)
    (repo / "llm" / "config.pbtxt").write_text(LLM_CONFIG)
    (repo / "llm" / "1" / "model.py").write_text(LLM_MODEL)
    server = ServerProcess([repo]).start()
    try:
        with running_gateway(server.url) as gateway:
            yield gateway
    finally:
        assert server.stop() == 0, server.log


def _raw(gw: GatewayProcess, model: str, data: bytes) -> Reply:
    headers = {"Inference-Header-Content-Length": "0"}
    return http_request(gw.url, "POST", f"/v2/models/{model}/infer", data, headers)


def _binary_output(reply: Reply) -> bytes:
    return reply.body[int(reply.headers["inference-header-content-length"]) :]


# --- raw binary bodies --------------------------------------------------------------------


def test_raw_binary_body_is_the_one_input(gw: GatewayProcess) -> None:
    data = np.arange(32, dtype=np.float32).tobytes()
    reply = _raw(gw, "fp32_one", data)
    assert reply.status == 200, reply
    header = json.loads(reply.body[: int(reply.headers["inference-header-content-length"])])
    assert header["outputs"][0]["shape"] == [1, 32]  # batch 1, the variable dim takes the rest
    assert _binary_output(reply) == data


def test_raw_binary_bytes_of_shape_1_is_the_one_element(gw: GatewayProcess) -> None:
    reply = _raw(gw, "bytes_one", b"427")
    assert reply.status == 200, reply
    assert _binary_output(reply) == b"\x03\x00\x00\x00427"  # one element, length-prefixed


@pytest.mark.parametrize(
    ("model", "message"),
    [
        (
            "bytes_var",
            "For BYTE datatype raw input 'INPUT0', the model must have input shape [1]",
        ),
        (
            "fp16_two_var",
            "The shape of the raw input 'INPUT0' can not be deduced because there are more "
            "than one variable-sized dimension",
        ),
    ],
)
def test_raw_binary_refusals(gw: GatewayProcess, model: str, message: str) -> None:
    reply = _raw(gw, model, np.ones(4, np.float16).tobytes())
    assert reply.status == 400
    assert reply.error == f"[request id: <id_unknown>] {message}"


# --- framing -----------------------------------------------------------------------------


def _exchange(gw: GatewayProcess, raw: bytes, expect_continue: bool = False) -> bytes:
    host, port = gw.url.split(":")
    with socket.create_connection((host, int(port)), timeout=10) as conn:
        if expect_continue:
            head, body = raw.split(b"\r\n\r\n", 1)
            conn.sendall(head + b"\r\n\r\n")
            assert conn.recv(100) == b"HTTP/1.1 100 Continue\r\n\r\n"
            raw = body
        conn.sendall(raw)
        data = b""
        while b"\r\n\r\n" not in data or len(data) < data.index(b"\r\n\r\n") + 4 + _length(data):
            chunk = conn.recv(65536)
            if not chunk:
                break
            data += chunk
        return data


def _length(data: bytes) -> int:
    for line in data.split(b"\r\n\r\n")[0].split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.lower() == b"content-length":
            return int(value)
    return 0


def test_chunked_transfer_encoding_with_content_length(gw: GatewayProcess) -> None:
    """requests sends both when a caller sets the header itself (Triton's
    test_content_encoding_chunked_manually): the chunked coding wins."""
    data = np.arange(8, dtype=np.float32).tobytes()
    chunked = b"%X\r\n%b\r\n0\r\n\r\n" % (len(data), data)
    raw = (
        b"POST /v2/models/fp32_one/infer HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
        b"Inference-Header-Content-Length: 0\r\nContent-Length: %d\r\n\r\n%b"
        % (len(chunked), chunked)
    )
    answer = _exchange(gw, raw)
    assert answer.startswith(b"HTTP/1.1 200 OK"), answer[:300]
    assert answer.endswith(data)


def test_query_parameters_do_not_change_the_route(gw: GatewayProcess) -> None:
    """tritonclient.http sends ``query_params`` as a query string; Triton routes on the
    path alone."""
    assert http_request(gw.url, "GET", "/v2/health/ready?probe=1").status == 200
    data = np.arange(4, dtype=np.float32).tobytes()
    headers = {"Inference-Header-Content-Length": "0"}
    reply = http_request(gw.url, "POST", "/v2/models/fp32_one/infer?x=y", data, headers)
    assert reply.status == 200 and _binary_output(reply) == data


def test_expect_100_continue_is_answered_promptly(gw: GatewayProcess) -> None:
    body = json.dumps(
        {"inputs": [{"name": "INPUT0", "shape": [1, 2], "datatype": "FP32", "data": [1, 2]}]}
    ).encode()
    raw = (
        b"POST /v2/models/fp32_one/infer HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
        b"Content-Length: %d\r\n\r\n%b" % (len(body), body)
    )
    answer = _exchange(gw, raw, expect_continue=True)
    assert answer.startswith(b"HTTP/1.1 200 OK"), answer[:300]
    assert json.loads(answer.split(b"\r\n\r\n", 1)[1])["outputs"][0]["data"] == [1.0, 2.0]


# --- generate ----------------------------------------------------------------------------


def _generate(gw: GatewayProcess, body: object, stream: bool = False) -> Reply:
    route = "generate_stream" if stream else "generate"
    return http_request(gw.url, "POST", f"/v2/models/llm/{route}", body)


def _ready(gw: GatewayProcess) -> None:
    if http_request(gw.url, "GET", "/v2/models/llm/ready").status != 200:
        pytest.skip("this service cannot serve the decoupled Python model")


def test_generate_echoes_the_id_and_merges_nested_parameters(gw: GatewayProcess) -> None:
    _ready(gw)
    reply = _generate(gw, {"PROMPT": "hi", "STREAM": False, "id": "42"})
    assert reply.status == 200, reply
    assert reply.json() == {"TEXT": "hi", "id": "42", "model_name": "llm", "model_version": "1"}
    assert list(reply.json()) == sorted(reply.json())  # Triton's std::map order
    # A key of the nested parameters object that names an input is that input.
    reply = _generate(gw, {"PROMPT": "hi", "parameters": {"STREAM": False}})
    assert reply.status == 200 and "id" not in reply.json(), reply


@pytest.mark.parametrize("stream", [False, True])
def test_generate_refusals_are_json_errors(gw: GatewayProcess, stream: bool) -> None:
    _ready(gw)
    cases = [
        ('{"PROMPT": "a", "STREAM": false, "PROMPT": "b"}', "input 'PROMPT' already exists"),
        ('{"PROMPT": "a", "STREAM": "no"}', "attempt to access JSON non-boolean as boolean"),
        ('{"PROMPT": "a", "parameters": 1}', "Expected JSON object for keyword: 'parameters'"),
        ('{"PROMPT": "a", "STREAM": false, "p": [1]}', "parameter 'p' has invalid type"),
        ('{"PROMPT": "a"}', "missing required input(s) ['STREAM']"),  # found by the service
    ]
    for body, fragment in cases:
        reply = _generate(gw, body, stream)
        assert reply.status == 400, (body, reply)
        assert reply.headers["content-type"] == "application/json"
        assert fragment in reply.error, (body, reply)


def test_generate_stream_model_errors_are_events(gw: GatewayProcess) -> None:
    _ready(gw)
    reply = _generate(gw, {"PROMPT": "hi", "STREAM": True, "FAIL_AFTER": 1}, stream=True)
    assert reply.status == 200  # the first response was fine
    assert reply.headers["content-type"] == "text/event-stream; charset=utf-8"
    events = [json.loads(e[6:]) for e in reply.body.split(b"\n\n") if e]
    assert events == [
        {"TEXT": "hi", "model_name": "llm", "model_version": "1"},
        {"error": "An Error Occurred"},
    ]
    reply = _generate(gw, {"PROMPT": "hi", "STREAM": True, "FAIL_AFTER": 0}, stream=True)
    assert reply.status == 500  # the first response is the model's error: its status
    assert reply.body == b'data: {"error":"An Error Occurred"}\n\n'
    reply = _generate(gw, {"PROMPT": "hi", "STREAM": True, "FAIL_AFTER": 0})
    assert reply.status == 500 and reply.error == "An Error Occurred"
