"""The legacy v1 HTTP API (``/api/...``) through the real gateway and service.

An old client's view: ``requests`` with text-protobuf ``NV-InferRequest`` headers, inputs
concatenated raw in the body; answers parsed with NVIDIA's 1.11 message classes
(tests/v1_reference.py): ``NV-Status`` / ``NV-InferResponse`` headers, outputs raw in the
body followed by the response header, status bodies in text, JSON or binary.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import requests
from conftest import running_gateway
from google.protobuf import text_format
from server_process import ServerProcess
from v1_reference import reference
from v1_support import build_repository


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = build_repository(tmp_path_factory.mktemp("v1_http_repo"))
    args = ["--model-control-mode", "explicit", "--load-model", "*"]
    with ServerProcess([repo], args) as server:
        yield server


@pytest.fixture(scope="module")
def base(service: ServerProcess) -> Iterator[str]:
    with running_gateway(service.url) as gw:
        yield f"http://{gw.url}"


def status_of(reply: requests.Response) -> Any:
    ref = reference()
    return text_format.Parse(reply.headers["NV-Status"], ref.RequestStatus())


def assert_status(reply: requests.Response, http: int, code: str, message: str = "") -> Any:
    status = status_of(reply)
    assert reply.status_code == http, (reply.status_code, reply.headers, reply.content[:300])
    assert status.code == reference().code(code), status
    assert message in status.msg, status.msg
    return status


def infer(
    base: str,
    model: str,
    header: str,
    body: bytes,
    suffix: str = "",
    session: requests.Session | None = None,
    **kwargs: Any,
) -> requests.Response:
    return (session or requests).post(
        f"{base}/api/infer/{model}{suffix}",
        data=body,
        headers={"NV-InferRequest": header, **kwargs.pop("headers", {})},
        timeout=30,
        **kwargs,
    )


def split_body(reply: requests.Response, fmt: str = "text") -> tuple[Any, list[bytes]]:
    """The NV-InferResponse header, and the raw outputs the body starts with (the appended
    full header must equal the one in the HTTP header)."""
    ref = reference()
    head = text_format.Parse(reply.headers["NV-InferResponse"], ref.InferResponseHeader())
    body = reply.content
    outputs, offset = [], 0
    for out in head.output:
        if out.HasField("raw"):
            size = out.raw.batch_byte_size
            outputs.append(body[offset : offset + size])
            offset += size
    tail = body[offset:]
    if fmt == "binary":
        appended = ref.InferResponseHeader.FromString(tail)
    else:
        appended = text_format.Parse(tail.decode("utf-8"), ref.InferResponseHeader())
    assert appended == head
    return head, outputs


# ----------------------------------------------------------------------------- health, status


def test_health(base: str) -> None:
    for mode in ("live", "ready"):
        reply = requests.get(f"{base}/api/health/{mode}", timeout=10)
        status = assert_status(reply, 200, "SUCCESS")
        assert status.server_id == "inference:0" and status.request_id > 0
        assert reply.content == b""
    assert_status(requests.get(f"{base}/api/health/dead", timeout=10), 400, "UNKNOWN", "'dead'")


def test_status_text_by_default_json_and_binary(base: str) -> None:
    ref = reference()
    text = requests.get(f"{base}/api/status", timeout=10)
    assert_status(text, 200, "SUCCESS")
    assert text.headers["content-type"].startswith("text/plain")
    status = text_format.Parse(text.text, ref.ServerStatus())
    assert status.id == "inference:0"
    assert status.model_status["classifier"].config.output[0].label_filename == "labels.txt"

    binary = requests.get(f"{base}/api/status?format=binary", timeout=10)
    assert_status(binary, 200, "SUCCESS")
    assert binary.headers["content-type"] == "application/octet-stream"
    decoded = ref.ServerStatus.FromString(binary.content)
    assert set(decoded.model_status) == set(status.model_status)

    as_json = requests.get(f"{base}/api/status/add_sub?format=json", timeout=10)
    assert_status(as_json, 200, "SUCCESS")
    doc = as_json.json()
    assert list(doc["modelStatus"]) == ["add_sub"]
    assert doc["modelStatus"]["add_sub"]["config"]["maxBatchSize"] == 8
    assert doc["modelStatus"]["add_sub"]["versionStatus"]["1"]["readyState"] == "MODEL_READY"
    accept = requests.get(
        f"{base}/api/status/add_sub", headers={"Accept": "application/json"}, timeout=10
    )
    assert accept.json()["id"] == "inference:0"


def test_status_of_an_unknown_model(base: str) -> None:
    reply = requests.get(f"{base}/api/status/nope", timeout=10)
    assert_status(reply, 400, "INVALID_ARG", "no status available for unknown model 'nope'")
    assert reply.content == b""


def test_model_control_and_repository_index(base: str) -> None:
    ref = reference()
    index = requests.get(f"{base}/api/repository/index", timeout=10)
    assert_status(index, 200, "SUCCESS")
    names = {m.name for m in text_format.Parse(index.text, ref.ModelRepositoryIndex()).models}
    assert {"add_sub", "strings", "seq"} <= names
    assert_status(
        requests.post(f"{base}/api/modelcontrol/unload/strings", timeout=30), 200, "SUCCESS"
    )
    status = text_format.Parse(
        requests.get(f"{base}/api/status/strings", timeout=10).text, ref.ServerStatus()
    )
    ready = ref.enums["ModelReadyState"].values_by_name["MODEL_READY"].number
    assert ready not in [
        v.ready_state for v in status.model_status["strings"].version_status.values()
    ]
    assert_status(
        requests.post(f"{base}/api/modelcontrol/load/strings", timeout=30), 200, "SUCCESS"
    )
    reply = requests.post(f"{base}/api/modelcontrol/reload/strings", timeout=30)
    assert_status(reply, 400, "UNKNOWN", "unknown action type 'reload'")
    shm = requests.get(f"{base}/api/sharedmemorycontrol/status", timeout=10)
    assert_status(shm, 200, "SUCCESS")
    assert not text_format.Parse(shm.text, ref.SharedMemoryStatus()).shared_memory_region


# ----------------------------------------------------------------------------- inference


def test_infer_raw_with_variable_dims(base: str) -> None:
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.ones((2, 3), dtype=np.float32)
    header = (
        'id: 9 batch_size: 2 input { name: "INPUT0" dims: 3 } input { name: "INPUT1" dims: 3 } '
        'output { name: "OUTPUT0" } output { name: "OUTPUT1" }'
    )
    reply = infer(base, "add_sub", header, a.tobytes() + b.tobytes())
    assert_status(reply, 200, "SUCCESS")
    assert reply.headers["content-type"] == "application/octet-stream"
    head, outputs = split_body(reply)
    assert (head.id, head.model_name, head.model_version, head.batch_size) == (9, "add_sub", 1, 2)
    assert list(head.output[0].raw.dims) == [3]
    np.testing.assert_array_equal(np.frombuffer(outputs[0], np.float32).reshape(2, 3), a + b)
    np.testing.assert_array_equal(np.frombuffer(outputs[1], np.float32).reshape(2, 3), a - b)


def test_infer_a_large_body(base: str) -> None:
    """A body from 256 KiB is received into one buffer (gateway/http11.py); the v1 inputs
    are cut from it as before."""
    a = np.arange(40000, dtype=np.float32)
    b = np.full(40000, 2, dtype=np.float32)
    header = (
        'batch_size: 1 input { name: "INPUT0" dims: 40000 } input { name: "INPUT1" dims: 40000 } '
        'output { name: "OUTPUT0" }'
    )
    reply = infer(base, "add_sub", header, a.tobytes() + b.tobytes())
    assert_status(reply, 200, "SUCCESS")
    _, outputs = split_body(reply)
    np.testing.assert_array_equal(np.frombuffer(outputs[0], np.float32), a + b)


def test_status_infer_stats_by_batch_size_over_http(base: str) -> None:
    """/api/status shows a v1 HTTP request under its header's batch_size, in text and JSON
    (where the map's uint32 keys are strings)."""
    ref = reference()

    def by_size() -> dict[int, int]:
        reply = requests.get(f"{base}/api/status/add_sub", timeout=10)
        status = text_format.Parse(reply.text, ref.ServerStatus())
        stats = status.model_status["add_sub"].version_status[1].infer_stats
        return {size: s.success.count for size, s in stats.items()}

    before = by_size()
    a = np.ones((5, 2), dtype=np.float32)
    header = (
        'batch_size: 5 input { name: "INPUT0" dims: 2 } input { name: "INPUT1" dims: 2 } '
        'output { name: "OUTPUT0" }'
    )
    assert_status(infer(base, "add_sub", header, a.tobytes() * 2), 200, "SUCCESS")
    after = by_size()
    assert after.get(5, 0) == before.get(5, 0) + 1
    assert {k: v for k, v in after.items() if k != 5} == {k: v for k, v in before.items() if k != 5}
    doc = requests.get(f"{base}/api/status/add_sub?format=json", timeout=10).json()
    five = doc["modelStatus"]["add_sub"]["versionStatus"]["1"]["inferStats"]["5"]
    assert int(five["success"]["count"]) == after[5]
    assert int(five["compute"]["count"]) == after[5]


def test_infer_a_version_with_binary_response_header(base: str) -> None:
    a = np.ones((1, 2), dtype=np.float32)
    header = (
        'batch_size: 1 input { name: "INPUT0" dims: 2 batch_byte_size: 8 } '
        'input { name: "INPUT1" dims: 2 batch_byte_size: 8 } output { name: "OUTPUT0" }'
    )
    reply = infer(base, "add_sub", header, a.tobytes() * 2, "/1", params={"format": "binary"})
    assert_status(reply, 200, "SUCCESS")
    head, outputs = split_body(reply, "binary")
    assert head.model_version == 1
    np.testing.assert_array_equal(np.frombuffer(outputs[0], np.float32), [2, 2])
    missing = infer(base, "add_sub", header, a.tobytes() * 2, "/7")
    assert missing.status_code == 400
    assert "add_sub" in status_of(missing).msg


def test_classification_over_http_batched_and_unbatched(base: str) -> None:
    x = np.array([[0.2, 0.1, 0.6, 0.1], [9, 8, 7, 6]], dtype=np.float32)
    header = 'batch_size: 2 input { name: "INPUT" } output { name: "PROB" cls { count: 2 } }'
    reply = infer(base, "classifier", header, x.tobytes())
    assert_status(reply, 200, "SUCCESS")
    head, outputs = split_body(reply)
    assert outputs == []
    rows = [[(c.idx, c.label) for c in row.cls] for row in head.output[0].batch_classes]
    assert rows == [[(2, "two"), (0, "zero")], [(0, "zero"), (1, "one")]]
    single = 'batch_size: 1 input { name: "INPUT" } output { name: "PROB" cls { count: 1 } }'
    reply = infer(base, "classifier_nobatch", single, x[1].tobytes())
    head, _ = split_body(reply)
    assert [(c.idx, c.value, c.label) for c in head.output[0].batch_classes[0].cls] == [
        (0, 9.0, "zero")
    ]


def test_sequence_over_http_with_correlation_ids(base: str) -> None:
    sums = []
    for value, flags in ((2, 1), (3, 0), (4, 2)):
        header = (
            f'correlation_id: 555 flags: {flags} batch_size: 1 input {{ name: "INPUT" }} '
            'output { name: "OUTPUT" }'
        )
        reply = infer(base, "seq", header, np.array([[value]], np.int32).tobytes())
        assert_status(reply, 200, "SUCCESS")
        _, outputs = split_body(reply)
        sums.append(int(np.frombuffer(outputs[0], np.int32)[0]))
    assert sums == [2, 5, 9]


def test_strings_need_no_config_when_sizes_are_given(base: str) -> None:
    data = b"\x03\x00\x00\x00abc"
    header = (
        f'batch_size: 1 input {{ name: "INPUT0" batch_byte_size: {len(data)} }} '
        'output { name: "OUTPUT0" }'
    )
    reply = infer(base, "strings", header, data)
    assert_status(reply, 200, "SUCCESS")
    assert split_body(reply)[1] == [data]


# ----------------------------------------------------------------------------- bad input

TWO = 'batch_size: 1 input { name: "INPUT0" dims: 2 } input { name: "INPUT1" dims: 2 }'


@pytest.mark.parametrize(
    ("model", "header", "body", "code", "message"),
    [
        (
            "add_sub",
            "batch_size: 1 input {",
            b"",
            "INVALID_ARG",
            "unable to parse the NV-InferRequest",
        ),
        ("add_sub", "no_such_field: 1", b"", "INVALID_ARG", "no_such_field"),
        ("add_sub", None, b"", "INVALID_ARG", "missing the NV-InferRequest header"),
        (
            "add_sub",
            TWO + ' output { name: "OUTPUT0" }',
            b"\0" * 12,
            "INVALID_ARG",
            "unexpected size for input 'INPUT1'",
        ),
        (
            "add_sub",
            TWO + ' output { name: "OUTPUT0" }',
            b"\0" * 20,
            "INVALID_ARG",
            "unexpected additional input data for model 'add_sub'",
        ),
        (
            "add_sub",
            TWO + ' output { name: "NOPE" }',
            b"\0" * 16,
            "INVALID_ARG",
            "unexpected inference output 'NOPE'",
        ),
        (
            "add_sub",
            TWO.replace("INPUT1", "INPUT9") + ' output { name: "OUTPUT0" }',
            b"\0" * 16,
            "INVALID_ARG",
            "unexpected inference input 'INPUT9'",
        ),
        (
            "add_sub",
            'batch_size: 1 input { name: "INPUT0" } input { name: "INPUT1" }',
            b"\0" * 16,
            "INVALID_ARG",
            "unable to find the byte size of input 'INPUT0'",
        ),
        (
            "add_sub",
            'batch_size: 0 input { name: "INPUT0" dims: 2 } input { name: "INPUT1" dims: 2 }',
            b"",
            "INVALID_ARG",
            "batch-size must be >= 1",
        ),
        ("nope", TWO, b"\0" * 16, "NOT_FOUND", "nope"),
        (
            "strings",
            'batch_size: 1 input { name: "INPUT0" } output { name: "OUTPUT0" cls { count: 1 } }',
            b"\1\0\0\0x",
            "INVALID_ARG",
            "unsupported type 'TYPE_STRING'",
        ),
    ],
    ids=[
        "unparsable",
        "unknown field",
        "no header",
        "body too short",
        "body too long",
        "unknown output",
        "unknown input",
        "sizes unknown",
        "batch 0",
        "unknown model",
        "classes of strings",
    ],
)
def test_bad_v1_requests_get_nv_status_and_a_4xx(
    base: str, model: str, header: str | None, body: bytes, code: str, message: str
) -> None:
    headers = {} if header is None else {"NV-InferRequest": header}
    reply = requests.post(f"{base}/api/infer/{model}", data=body, headers=headers, timeout=30)
    assert 400 <= reply.status_code < 500, reply.status_code
    assert_status(reply, reply.status_code, code, message)
    assert "NV-InferResponse" in reply.headers
    # The server goes on serving.
    a = np.ones(2, dtype=np.float32).tobytes()
    assert_status(
        infer(base, "add_sub", TWO + ' output { name: "OUTPUT0" }', a * 2), 200, "SUCCESS"
    )


def test_bad_paths_and_methods(base: str) -> None:
    assert requests.get(f"{base}/api/infer/add_sub", timeout=10).status_code == 405
    bad_version = infer(base, "add_sub", TWO, b"", "/x1")
    assert_status(bad_version, 400, "INVALID_ARG", "invalid model version 'x1'")
    assert requests.get(f"{base}/api/nothing", timeout=10).status_code == 404


def test_openapi_lists_the_v1_routes(base: str) -> None:
    doc = requests.get(f"{base}/openapi.json", timeout=10).json()
    paths = doc["paths"]
    for path, method in [
        ("/api/health/{mode}", "get"),
        ("/api/status", "get"),
        ("/api/status/{model_name}", "get"),
        ("/api/infer/{model_name}", "post"),
        ("/api/infer/{model_name}/{model_version}", "post"),
        ("/api/modelcontrol/{type}/{model_name}", "post"),
        ("/api/repository/index", "get"),
        ("/api/sharedmemorycontrol/status", "get"),
    ]:
        assert method in paths[path], path
    infer_op = paths["/api/infer/{model_name}/{model_version}"]["post"]
    assert "nvidia.inferenceserver.GRPCService/Infer" in infer_op["summary"]
    names = {p["name"]: p for p in infer_op["parameters"]}
    assert names["NV-InferRequest"]["in"] == "header"
    assert names["model_version"]["schema"]["type"] == "integer"
    assert "NV-Status" in infer_op["responses"]["400"]["headers"]
    control = paths["/api/modelcontrol/{type}/{model_name}"]["post"]["parameters"][0]
    assert control["schema"]["enum"] == ["unload", "load"]
    assert json.dumps(doc)  # serializable as served


def test_restricted_api_guards_v1_routes(service: ServerProcess) -> None:
    with running_gateway(service.url, ["--http-restricted-api=inference:v1-key=abc"]) as gw:
        url = f"http://{gw.url}"
        a = np.ones(2, dtype=np.float32).tobytes() * 2
        header = TWO + ' output { name: "OUTPUT0" }'
        # No connection kept: the gateway's stop serves open ones until they close
        # (Triton's HTTP stop), and requests keeps its sockets past the session's close.
        with requests.Session() as http:
            http.headers["Connection"] = "close"
            refused = infer(url, "add_sub", header, a, session=http)
            assert refused.status_code == 403
            error = {"error": "This API is restricted, expecting header 'v1-key'"}
            assert refused.json() == error
            allowed = infer(url, "add_sub", header, a, headers={"v1-key": "abc"}, session=http)
            assert_status(allowed, 200, "SUCCESS")
            assert http.get(f"{url}/api/health/live", timeout=10).status_code == 200
