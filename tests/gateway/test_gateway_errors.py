"""Bad input is always a 4xx with a clear ``error``, never a 500; and the service going away
(and coming back) is a 503 that heals by itself."""

from __future__ import annotations

import gzip
import json
import time
import zlib
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import running_gateway
from gateway_process import GatewayProcess, Reply, http_request
from server_process import DEFAULT_REPOSITORY, ServerProcess

INFER = "/v2/models/add_sub/infer"


def _input(**overrides: Any) -> dict[str, Any]:
    tensor: dict[str, Any] = {"name": "INPUT0", "shape": [1, 2], "datatype": "FP32", "data": [1, 2]}
    tensor.update(overrides)
    return {k: v for k, v in tensor.items() if v is not None}


def _request(*inputs: dict[str, Any], **extra: Any) -> dict[str, Any]:
    second = _input(name="INPUT1")
    return {"inputs": [*inputs, second] if inputs else [_input(), second], **extra}


# (case id, body, fragment the error must contain: Triton's texts where Triton has them)
SHM = {"shared_memory_region": "r", "shared_memory_byte_size": 8}

BAD_INFER_BODIES: list[tuple[str, Any, str]] = [
    ("malformed-json", b'{"inputs": [', "failed to parse the request JSON buffer: "),
    (
        "not-an-object",
        b"[1, 2]",
        "Unable to parse 'inputs': attempt to access non-existing object member 'inputs'",
    ),
    (
        "inputs-not-a-list",
        {"inputs": {"name": "INPUT0"}},
        "Unable to parse 'inputs': attempt to access JSON non-array as array",
    ),
    ("missing-inputs", {}, "attempt to access non-existing object member 'inputs'"),
    ("unknown-top-level-field", _request(colour="blue"), "unknown field(s) ['colour']"),
    ("unknown-input-field", _request(_input(colour="red")), "unknown field(s) ['colour']"),
    (
        "unknown-output-field",
        _request(outputs=[{"name": "OUTPUT0", "colour": 1}]),
        "unknown field(s) ['colour']",
    ),
    ("input-without-name", _request(_input(name=None)), "Unable to parse 'name': "),
    ("unknown-datatype", _request(_input(datatype="FLOAT")), "invalid datatype for input INPUT0"),
    ("strings-for-fp32", _request(_input(data=["a", "b"])), "non-number as double"),
    (
        "floats-for-int32",
        _request(_input(datatype="INT32", data=[1.5, 2])),
        "Unable to parse 'data': attempt to access JSON non-signed-integer as signed-integer",
    ),
    ("ints-for-bool", _request(_input(datatype="BOOL", data=[1, 0])), "non-boolean as boolean"),
    ("out-of-range-int8", _request(_input(datatype="INT8", data=[1, 300])), "out of range"),
    (
        "numbers-for-bytes",
        _request(_input(datatype="BYTES", data=["a", 1])),
        "Unable to parse JSON bytes array: attempt to access JSON non-string as string",
    ),
    ("null-in-data", _request(_input(data=[1, None])), "'data'"),
    ("ragged-data", _request(_input(data=[[1], [2, 3]])), "Shape does not match true shape"),
    (
        "too-few-elements",
        _request(_input(data=[1])),
        "Unable to parse 'data': Shape does not match true shape of 'data' field",
    ),
    ("too-many-elements", _request(_input(data=[1, 2, 3])), "Shape does not match"),
    ("data-not-a-list", _request(_input(data=5)), "non-array as array"),
    (
        "negative-dim",
        _request(_input(shape=[-1, 2])),
        "Unable to parse 'shape': attempt to access JSON non-unsigned-integer as unsigned-integer",
    ),
    ("shape-not-a-list", _request(_input(shape="1,2")), "Unable to parse 'shape': "),
    (
        "data-and-binary",
        _request(_input(parameters={"binary_data_size": 8})),
        "Input must set only one of the following fields: 'data', 'binary_data_size' in "
        "'parameters', 'shared_memory_region' in 'parameters'. But set 'data' "
        "'binary_data_size'",
    ),
    ("no-data", _request(_input(data=None)), "But no field is set"),
    (
        "shm-region-not-a-string",
        _request(_input(data=None, parameters={"shared_memory_region": 3})),
        "Unable to parse 'shared_memory_region': attempt to access JSON non-string as string",
    ),
    (
        "shm-negative-offset",
        _request(_input(data=None, parameters={**SHM, "shared_memory_offset": -4})),
        "Unable to parse 'shared_memory_offset': attempt to access JSON non-unsigned-integer",
    ),
    (
        "shm-output-and-binary",
        _request(outputs=[{"name": "OUTPUT0", "parameters": {**SHM, "binary_data": True}}]),
        "Output can't set both 'shared_memory_region' and 'binary_data'",
    ),
    (
        "shm-output-and-classification",
        _request(outputs=[{"name": "OUTPUT0", "parameters": {**SHM, "classification": 2}}]),
        "Output can't set both 'shared_memory_region' and 'classification'",
    ),
    (
        "binary-size-not-int",
        _request(_input(data=None, parameters={"binary_data_size": "8"})),
        "binary_data_size",
    ),
    (
        "binary-without-bytes",
        _request(_input(data=None, parameters={"binary_data_size": 8})),
        "expecting 8 additional bytes",
    ),
    (
        "parameters-not-object",
        _request(parameters=[1]),
        "failed to get request params.: attempt to get members for non-object",
    ),
    (
        "parameter-list-value",
        _request(parameters={"priority": [1]}),
        "parameter 'priority' has invalid type",
    ),
    ("reserved-parameter", _request(parameters={"triton_x": 1}), "reserved for Triton"),
    (
        "binary-data-output-not-bool",
        _request(parameters={"binary_data_output": 1}),
        "Unable to parse 'binary_data_output': attempt to access JSON non-boolean as boolean",
    ),
    ("id-not-string", _request(id=5), "Unable to parse 'id': attempt to access JSON non-string"),
    ("model-name-mismatch", _request(model_name="other"), "differs from the URL"),
    (
        "output-binary-not-bool",
        _request(outputs=[{"name": "OUTPUT0", "parameters": {"binary_data": "yes"}}]),
        "Unable to parse 'binary_data': attempt to access JSON non-boolean as boolean",
    ),
    # Errors found by the service are 400s too, with its message.
    ("wrong-datatype-for-model", _request(_input(datatype="INT32")), "expects 'FP32'"),
    ("unknown-input-name", _request(_input(name="NOPE")), "unexpected inference input 'NOPE'"),
]


@pytest.mark.parametrize(
    ("case", "body", "fragment"), BAD_INFER_BODIES, ids=[c[0] for c in BAD_INFER_BODIES]
)
def test_bad_infer_request_is_400(
    gateway: GatewayProcess, case: str, body: Any, fragment: str
) -> None:
    reply = http_request(gateway.url, "POST", INFER, body)
    assert reply.status == 400, reply
    assert fragment in reply.error, reply.error


def _with_header(gateway: GatewayProcess, body: bytes, header: str) -> Reply:
    return http_request(
        gateway.url, "POST", INFER, body, {"Inference-Header-Content-Length": header}
    )


def test_bad_binary_framing(gateway: GatewayProcess) -> None:
    head = json.dumps(_request(_input(data=None, parameters={"binary_data_size": 8}))).encode()
    body = head + b"\0" * 8
    assert _with_header(gateway, body, str(len(head))).status == 200
    for header, fragment in (
        # Read as C's atoi, as Triton does: no digits is 0, a raw binary request.
        ("abc", "Raw request must only have 1 input (found 1) to be deduced but got 2"),
        ("-5", "inference header size should be in range (0, "),
        (str(len(body) + 1), "inference header size"),
        (str(len(head) - 1), "failed to parse the request JSON buffer"),
    ):
        reply = _with_header(gateway, body, header)
        assert reply.status == 400 and fragment in reply.error, (header, reply)
    reply = _with_header(gateway, body + b"\0\0", str(len(head)))
    assert reply.status == 400 and "unexpected additional input data" in reply.error
    reply = _with_header(gateway, body[:-2], str(len(head)))
    assert reply.status == 400 and "expecting 2 additional bytes" in reply.error


BAD_PLAIN_REQUESTS = [
    ("POST", "/v2/repository/index", b"{oops", "failed to parse the request JSON buffer"),
    ("POST", "/v2/repository/index", {"ready": "yes"}, "ready"),
    ("POST", "/v2/repository/index", {"colour": 1}, "unknown field 'colour'"),
    ("POST", "/v2/repository/index", [1], "must be a JSON object"),
    ("POST", "/v2/repository/models/add_sub/load", {"parameters": {"x": [1]}}, "parameters"),
    ("POST", "/v2/repository/models/add_sub/load", {"parameters": 3}, "must be a JSON object"),
    (
        "POST",
        "/v2/repository/models/add_sub/unload",
        {"parameters": {"unload_dependents": None}},
        "unload_dependents",
    ),
    (
        "POST",
        "/v2/systemsharedmemory/region/r/register",
        {"key": "/k", "byte_size": -1},
        "out of range",
    ),
    (
        "POST",
        "/v2/systemsharedmemory/region/r/register",
        {"byte_size": 8},
        "Shared memory register request has no 'key' field",
    ),
    (
        "POST",
        "/v2/systemsharedmemory/region/r/register",
        {"key": "/k"},
        "Shared memory register request has no 'byte_size' field",
    ),
    (
        "POST",
        "/v2/cudasharedmemory/region/r/register",
        {"device_id": 0, "byte_size": 8},
        "Shared memory register request has no 'raw_handle' field",
    ),
    (
        "POST",
        "/v2/cudasharedmemory/region/r/register",
        {"raw_handle": {"b64": "@@"}},
        "'raw_handle' must be a valid base64 encoded cudaIpcMemHandle_t",
    ),
    ("POST", "/v2/logging", {"log_info": [True]}, "log_info"),
]


@pytest.mark.parametrize(("method", "path", "body", "fragment"), BAD_PLAIN_REQUESTS)
def test_bad_plain_request_is_400(
    gateway: GatewayProcess, method: str, path: str, body: Any, fragment: str
) -> None:
    reply = http_request(gateway.url, method, path, body)
    assert reply.status == 400, reply
    assert fragment in reply.error, reply.error


@pytest.mark.parametrize(
    "path",
    [
        "/",
        "/v2/",
        "/v1/models",
        "/v2/models",
        "/v2/models/add_sub/nope",
        "/v2/health",
        "/v2/models/a/versions/1/trace/setting",
        "/v2/repository/models/x",
    ],
)
def test_unknown_route_is_404(gateway: GatewayProcess, path: str) -> None:
    reply = http_request(gateway.url, "GET", path)
    assert (reply.status, reply.error) == (404, "Not Found")


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/v2"),
        ("DELETE", "/v2/models/add_sub"),
        ("GET", INFER),
        ("PUT", "/v2/health/live"),
        ("GET", "/v2/repository/index"),
        ("POST", "/v2/models/stats"),
        ("POST", "/openapi.json"),
    ],
)
def test_wrong_method_is_405(gateway: GatewayProcess, method: str, path: str) -> None:
    reply = http_request(gateway.url, method, path, b"{}" if method != "GET" else None)
    assert (reply.status, reply.error) == (405, "Method Not Allowed")


def test_infer_on_a_decoupled_model_is_501_in_triton_words(gateway: GatewayProcess) -> None:
    body = {"inputs": [{"name": "TEXT", "shape": [1], "datatype": "BYTES", "data": ["a b"]}]}
    reply = http_request(gateway.url, "POST", "/v2/models/token_stream/infer", body)
    assert (reply.status, reply.error) == (
        501,
        "HTTP end point doesn't support models with decoupled transaction policy",
    )
    # generate streams it, as Triton does
    reply = http_request(gateway.url, "POST", "/v2/models/token_stream/generate", {"TEXT": "a"})
    assert reply.status == 200, reply


def test_content_encoding_errors(gateway: GatewayProcess) -> None:
    body = json.dumps(_request()).encode()
    reply = http_request(gateway.url, "POST", INFER, body, {"Content-Encoding": "br"})
    assert reply.status == 415 and "Content-Encoding" in reply.error
    assert reply.headers["accept-encoding"] == "gzip, deflate"
    reply = http_request(gateway.url, "POST", INFER, b"not gzip", {"Content-Encoding": "gzip"})
    assert reply.status == 400 and "malformed gzip" in reply.error
    reply = http_request(
        gateway.url, "POST", INFER, gzip.compress(body)[:-8], {"Content-Encoding": "gzip"}
    )
    assert reply.status == 400


@pytest.fixture(scope="module")
def small_gateway(default_server: ServerProcess) -> Iterator[GatewayProcess]:
    with running_gateway(default_server.url, ["--http-max-body-bytes", "2048"]) as gw:
        yield gw


def test_oversize_body_is_413(small_gateway: GatewayProcess) -> None:
    ok = http_request(small_gateway.url, "POST", INFER, _request())
    assert ok.status == 200
    big = _request(_input(shape=[1, 600], data=[0.5] * 600))
    reply = http_request(small_gateway.url, "POST", INFER, big)
    assert reply.status == 413 and "--http-max-body-bytes" in reply.error
    # A small compressed body that inflates past the limit is refused as well.
    bomb = gzip.compress(b" " * 100_000 + json.dumps(_request()).encode())
    assert len(bomb) < 2048
    reply = http_request(small_gateway.url, "POST", INFER, bomb, {"Content-Encoding": "gzip"})
    assert reply.status == 413
    # Refused from its gzip trailer; a deflate body has none and is inflated to the limit.
    bomb = zlib.compress(b" " * 100_000 + json.dumps(_request()).encode())
    reply = http_request(small_gateway.url, "POST", INFER, bomb, {"Content-Encoding": "deflate"})
    assert reply.status == 413 and "--http-max-body-bytes" in reply.error
    # The gateway goes on serving after refusing.
    assert http_request(small_gateway.url, "GET", "/v2/health/ready").status == 200


def test_service_down_is_503_and_recovers(tmp_path: Any) -> None:
    server = ServerProcess([DEFAULT_REPOSITORY]).start()
    port = server.port
    with running_gateway(server.url) as gw:
        assert http_request(gw.url, "GET", "/v2/health/ready").status == 200
        server.kill()  # away without its stop (a graceful stop ends the gateway too: 033)
        for path in ("/v2/health/ready", "/v2/models/add_sub"):
            reply = http_request(gw.url, "GET", path)
            assert reply.status == 503, reply
            assert f"inference service at 127.0.0.1:{port} is unavailable" in reply.error
        reply = http_request(gw.url, "POST", INFER, _request())
        assert reply.status == 503
        # On the same port, and the same local socket where there is one (as serve.sh does).
        local = ["--grpc-local-socket", server.local_socket] if server.local_socket else []
        restarted = ServerProcess(
            [DEFAULT_REPOSITORY], extra_args=["--grpc-port", str(port), *local]
        ).start()
        try:
            deadline = time.monotonic() + 15
            while http_request(gw.url, "GET", "/v2/health/ready").status != 200:
                assert time.monotonic() < deadline, "the gateway did not reconnect"
                time.sleep(0.1)
            assert http_request(gw.url, "POST", INFER, _request()).status == 200
        finally:
            assert restarted.stop() == 0
