"""Raw HTTP against every v2 endpoint: Triton's JSON shapes, status codes and headers.

Plain http.client, so what is checked is the bytes on the wire, not a client library's
reading of them.
"""

from __future__ import annotations

import base64
import gzip
import json
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path

import models
import numpy as np
import pytest
import tritonclient.http as httpclient
from conftest import running_gateway
from gateway_process import GatewayProcess, Reply, http_request
from server_process import ServerProcess
from tritonclient.utils import InferenceServerException

ADD_SUB = {
    "inputs": [
        {"name": "INPUT0", "shape": [1, 3], "datatype": "FP32", "data": [[1, 2, 3]]},
        {"name": "INPUT1", "shape": [1, 3], "datatype": "FP32", "data": [1, 1, 1]},
    ]
}


def get(gw: GatewayProcess, path: str) -> Reply:
    return http_request(gw.url, "GET", path)


def post(gw: GatewayProcess, path: str, body: object = None, **headers: str) -> Reply:
    return http_request(gw.url, "POST", path, body, headers)


# --------------------------------------------------------------------------- health, metadata


def test_server_metadata(gateway: GatewayProcess) -> None:
    reply = get(gateway, "/v2")
    assert reply.status == 200
    assert reply.headers["content-type"] == "application/json"
    doc = reply.json()
    assert list(doc) == ["name", "version", "extensions"]
    assert "model_repository" in doc["extensions"]


@pytest.mark.parametrize("path", ["/v2/health/live", "/v2/health/ready"])
def test_health_is_status_only(gateway: GatewayProcess, path: str) -> None:
    reply = get(gateway, path)
    assert (reply.status, reply.body) == (200, b"")


@pytest.mark.parametrize(
    "path", ["/v2/models/add_sub/ready", "/v2/models/add_sub/versions/1/ready"]
)
def test_model_ready(gateway: GatewayProcess, path: str) -> None:
    reply = get(gateway, path)
    assert (reply.status, reply.body) == (200, b"")


@pytest.mark.parametrize(
    "path", ["/v2/models/no_such_model/ready", "/v2/models/add_sub/versions/7/ready"]
)
def test_model_not_ready_is_400(gateway: GatewayProcess, path: str) -> None:
    reply = get(gateway, path)
    assert reply.status == 400
    assert reply.error == "Model version not ready"


@pytest.mark.parametrize("path", ["/v2/models/add_sub", "/v2/models/add_sub/versions/1"])
def test_model_metadata(gateway: GatewayProcess, path: str) -> None:
    reply = get(gateway, path)
    assert reply.status == 200
    assert reply.json() == {
        "name": "add_sub",
        "versions": ["1"],
        "platform": "onnxruntime_onnx",
        "inputs": [
            {"name": "INPUT0", "datatype": "FP32", "shape": [-1, -1]},
            {"name": "INPUT1", "datatype": "FP32", "shape": [-1, -1]},
        ],
        "outputs": [
            {"name": "OUTPUT0", "datatype": "FP32", "shape": [-1, -1]},
            {"name": "OUTPUT1", "datatype": "FP32", "shape": [-1, -1]},
        ],
    }


def test_unknown_model_is_404(gateway: GatewayProcess) -> None:
    for path in ("/v2/models/nope", "/v2/models/nope/config"):
        reply = get(gateway, path)
        assert reply.status == 404, path
        assert "nope" in reply.error
    # Statistics answer as Triton's TRITONSERVER_ServerModelStatistics does.
    reply = get(gateway, "/v2/models/nope/stats")
    assert (reply.status, reply.error) == (400, "requested model 'nope' is not available")
    reply = get(gateway, "/v2/models/add_sub/versions/9")
    assert reply.status == 404
    assert "version 9" in reply.error


@pytest.mark.parametrize(
    "path", ["/v2/models/add_sub/config", "/v2/models/add_sub/versions/1/config"]
)
def test_model_config(gateway: GatewayProcess, path: str) -> None:
    reply = get(gateway, path)
    assert reply.status == 200
    config = reply.json()
    assert config["name"] == "add_sub"
    assert config["max_batch_size"] == 8  # int64 fields are JSON numbers, as Triton writes
    assert config["input"][0]["data_type"] == "TYPE_FP32"  # enums by name
    assert config["input"][0]["dims"] == [-1]
    assert config["instance_group"][0]["kind"] == "KIND_CPU"
    # Only what config.pbtxt gives: loading the model reads parameters, adds none.
    assert config["parameters"] == {}


def test_statistics(gateway: GatewayProcess) -> None:
    assert post(gateway, "/v2/models/add_sub/infer", ADD_SUB).status == 200
    every = get(gateway, "/v2/models/stats")
    assert every.status == 200
    names = [s["name"] for s in every.json()["model_stats"]]
    # The default repository grows with other features; these three are always there.
    assert {"add_sub", "iris_classifier", "text_upper"} <= set(names)
    for path in ("/v2/models/add_sub/stats", "/v2/models/add_sub/versions/1/stats"):
        (stats,) = get(gateway, path).json()["model_stats"]
        assert stats["name"] == "add_sub" and stats["version"] == "1"
        assert stats["inference_count"] >= 1
        assert set(stats["inference_stats"]) == {
            "success",
            "fail",
            "queue",
            "compute_input",
            "compute_infer",
            "compute_output",
            "cache_hit",
            "cache_miss",
        }
        assert stats["inference_stats"]["success"]["count"] >= 1
        assert isinstance(stats["inference_stats"]["success"]["ns"], int)
        assert stats["batch_stats"][0]["batch_size"] == 1
        assert isinstance(stats["response_stats"], dict)


def test_repository_index(gateway: GatewayProcess) -> None:
    for body in (None, {}, {"ready": True}, {"ready": False}):
        reply = post(gateway, "/v2/repository/index", body)
        assert reply.status == 200, reply
        index = reply.json()
        assert [e["name"] for e in index] == sorted(e["name"] for e in index)
        assert all(e == {"name": e["name"], "version": "1", "state": "READY"} for e in index)
        assert {"add_sub", "iris_classifier", "text_upper"} <= {e["name"] for e in index}


def test_load_unload_refused_in_mode_none(gateway: GatewayProcess) -> None:
    reply = post(gateway, "/v2/repository/models/add_sub/unload")
    assert reply.status == 503
    assert "not allowed" in reply.error
    reply = post(gateway, "/v2/repository/models/add_sub/load", {"parameters": {}})
    assert reply.status == 503


# --------------------------------------------------------------------------- inference


def test_infer_json(gateway: GatewayProcess) -> None:
    reply = post(gateway, "/v2/models/add_sub/infer", {**ADD_SUB, "id": "r-7"})
    assert reply.status == 200
    assert reply.headers["content-type"] == "application/json"
    assert "inference-header-content-length" not in reply.headers
    assert reply.json() == {
        "id": "r-7",
        "model_name": "add_sub",
        "model_version": "1",
        "outputs": [
            {"name": "OUTPUT0", "datatype": "FP32", "shape": [1, 3], "data": [2.0, 3.0, 4.0]},
            {"name": "OUTPUT1", "datatype": "FP32", "shape": [1, 3], "data": [0.0, 1.0, 2.0]},
        ],
    }


def test_infer_versioned_path(gateway: GatewayProcess) -> None:
    reply = post(gateway, "/v2/models/add_sub/versions/1/infer", ADD_SUB)
    assert reply.status == 200 and reply.json()["model_version"] == "1"
    reply = post(gateway, "/v2/models/add_sub/versions/3/infer", ADD_SUB)
    assert reply.status == 404


def _binary_request(outputs_binary: bool) -> tuple[bytes, int]:
    a = np.array([[1, 2, 3, 4]], np.float32)
    b = np.array([[0.5, 0.5, 0.5, 0.5]], np.float32)
    header = {
        "inputs": [
            {
                "name": "INPUT0",
                "shape": [1, 4],
                "datatype": "FP32",
                "parameters": {"binary_data_size": 16},
            },
            {"name": "INPUT1", "shape": [1, 4], "datatype": "FP32", "data": b.tolist()},
        ],
        "outputs": [
            {"name": "OUTPUT0", "parameters": {"binary_data": outputs_binary}},
            {"name": "OUTPUT1"},
        ],
    }
    head = json.dumps(header).encode()
    return head + a.tobytes(), len(head)


def _split(reply: Reply) -> tuple[dict[str, object], bytes]:
    length = int(reply.headers["inference-header-content-length"])
    return json.loads(reply.body[:length]), reply.body[length:]


def test_infer_binary_and_json_mixed(gateway: GatewayProcess) -> None:
    body, length = _binary_request(outputs_binary=True)
    reply = post(
        gateway,
        "/v2/models/add_sub/infer",
        body,
        **{
            "Inference-Header-Content-Length": str(length),
            "Content-Type": "application/octet-stream",
        },
    )
    assert reply.status == 200, reply
    assert reply.headers["content-type"] == "application/octet-stream"
    doc, rest = _split(reply)
    out0, out1 = doc["outputs"]  # type: ignore[misc]
    assert out0 == {
        "name": "OUTPUT0",
        "datatype": "FP32",
        "shape": [1, 4],
        "parameters": {"binary_data_size": 16},
    }
    assert out1["data"] == [0.5, 1.5, 2.5, 3.5]
    np.testing.assert_array_equal(np.frombuffer(rest, np.float32), [1.5, 2.5, 3.5, 4.5])


def test_binary_data_output_parameter(gateway: GatewayProcess) -> None:
    """binary_data_output makes every output binary unless the output says otherwise."""
    body = {
        **ADD_SUB,
        "parameters": {"binary_data_output": True},
        "outputs": [{"name": "OUTPUT0"}, {"name": "OUTPUT1", "parameters": {"binary_data": False}}],
    }
    doc, rest = _split(post(gateway, "/v2/models/add_sub/infer", body))
    out0, out1 = doc["outputs"]  # type: ignore[misc]
    assert out0["parameters"] == {"binary_data_size": 12} and "data" not in out0
    assert out1["data"] == [0.0, 1.0, 2.0]
    np.testing.assert_array_equal(np.frombuffer(rest, np.float32), [2, 3, 4])
    # Without "outputs" every output of the model comes back, all binary.
    doc, rest = _split(
        post(
            gateway,
            "/v2/models/add_sub/infer",
            {**ADD_SUB, "parameters": {"binary_data_output": True}},
        )
    )
    assert [o["parameters"]["binary_data_size"] for o in doc["outputs"]] == [12, 12]  # type: ignore[index]
    assert len(rest) == 24


def test_bytes_tensor_json_and_binary(gateway: GatewayProcess) -> None:
    reply = post(
        gateway,
        "/v2/models/text_upper/infer",
        {"inputs": [{"name": "TEXT", "shape": [2], "datatype": "BYTES", "data": ["ab", "Cd é"]}]},
    )
    assert reply.json()["outputs"][0]["data"] == ["AB", "CD é"]
    raw = b"".join(struct.pack("<I", len(s)) + s for s in (b"xy", b""))
    head = json.dumps(
        {
            "inputs": [
                {
                    "name": "TEXT",
                    "shape": [2],
                    "datatype": "BYTES",
                    "parameters": {"binary_data_size": len(raw)},
                }
            ],
            "outputs": [{"name": "UPPER", "parameters": {"binary_data": True}}],
        }
    ).encode()
    reply = post(
        gateway,
        "/v2/models/text_upper/infer",
        head + raw,
        **{"Inference-Header-Content-Length": str(len(head))},
    )
    _, rest = _split(reply)
    assert rest == struct.pack("<I", 2) + b"XY" + struct.pack("<I", 0)


def test_raw_binary_request(gateway: GatewayProcess) -> None:
    """Header length 0: the whole body is the only input's data; outputs come back binary."""
    data = np.array([[5.1, 3.5, 1.4, 0.2]], np.float32)
    reply = post(
        gateway,
        "/v2/models/iris_classifier/infer",
        data.tobytes(),
        **{"Inference-Header-Content-Length": "0"},
    )
    assert reply.status == 200, reply
    doc, rest = _split(reply)
    assert [o["name"] for o in doc["outputs"]] == ["label", "probabilities"]  # type: ignore[index]
    assert doc["outputs"][0]["parameters"]["binary_data_size"] == 8  # type: ignore[index]
    assert np.frombuffer(rest[:8], np.int64).tolist() == [0]
    reply = post(
        gateway,
        "/v2/models/add_sub/infer",
        data.tobytes(),
        **{"Inference-Header-Content-Length": "0"},
    )
    assert reply.status == 400
    assert "Raw request must only have 1 input (found 1) to be deduced but got 2" in reply.error


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
def test_compressed_request_and_response(gateway: GatewayProcess, encoding: str) -> None:
    raw = json.dumps(ADD_SUB).encode()
    body = gzip.compress(raw) if encoding == "gzip" else zlib.compress(raw)
    reply = post(
        gateway,
        "/v2/models/add_sub/infer",
        body,
        **{"Content-Encoding": encoding, "Accept-Encoding": f"identity;q=0.5, {encoding}"},
    )
    assert reply.status == 200
    assert reply.headers["content-encoding"] == encoding
    plain = gzip.decompress(reply.body) if encoding == "gzip" else zlib.decompress(reply.body)
    assert json.loads(plain)["outputs"][0]["data"] == [2.0, 3.0, 4.0]


def test_accept_encoding_weights(gateway: GatewayProcess) -> None:
    reply = post(
        gateway,
        "/v2/models/add_sub/infer",
        ADD_SUB,
        **{"Accept-Encoding": "gzip;q=0.2, deflate;q=0.9"},
    )
    assert reply.headers["content-encoding"] == "deflate"
    reply = post(gateway, "/v2/models/add_sub/infer", ADD_SUB, **{"Accept-Encoding": "br"})
    assert "content-encoding" not in reply.headers
    assert reply.json()["model_name"] == "add_sub"


@pytest.mark.parametrize("version", ["", "/versions/1"])
def test_generate(gateway: GatewayProcess, version: str) -> None:
    """Flat JSON in; inputs by name, shaped from the metadata; one flat JSON object out."""
    body = {"INPUT0": [1, 2], "INPUT1": [3, 4]}
    reply = post(gateway, f"/v2/models/add_sub{version}/generate", body)
    assert reply.status == 200, reply
    assert reply.json() == {
        "model_name": "add_sub",
        "model_version": "1",
        "OUTPUT0": [4.0, 6.0],
        "OUTPUT1": [-2.0, -2.0],
    }
    reply = post(gateway, "/v2/models/text_upper/generate", {"TEXT": "hello"})
    assert reply.json()["UPPER"] == "HELLO"  # one element: a bare value, as Triton
    reply = post(gateway, "/v2/models/iris_classifier/generate", {"input": [5.1, 3.5, 1.4, 0.2]})
    doc = reply.json()
    assert doc["label"] == 0 and len(doc["probabilities"]) == 3


def _events(reply: Reply) -> list[dict[str, object]]:
    assert reply.headers["content-type"].startswith("text/event-stream")
    chunks = reply.body.decode().split("\n\n")
    assert chunks[-1] == ""
    assert all(c.startswith("data: ") for c in chunks[:-1])
    return [json.loads(c[len("data: ") :]) for c in chunks[:-1]]


def test_generate_stream_is_server_sent_events(gateway: GatewayProcess) -> None:
    reply = post(gateway, "/v2/models/text_upper/generate_stream", {"TEXT": ["ab", "c"]})
    assert reply.status == 200
    assert reply.headers["transfer-encoding"] == "chunked"
    expected = {"model_name": "text_upper", "model_version": "1", "UPPER": ["AB", "C"]}
    assert _events(reply) == [expected]
    # Refused before inference: a JSON error, as Triton answers (not an event).
    reply = post(gateway, "/v2/models/add_sub/versions/1/generate_stream", {"INPUT0": [1.0]})
    assert reply.status == 400
    assert reply.headers["content-type"] == "application/json"
    assert "missing required input(s) ['INPUT1']" in reply.error


@pytest.mark.parametrize(
    ("path", "body", "status", "fragment"),
    [
        ("/v2/models/nope/generate", {"x": 1}, 404, "unknown model"),
        ("/v2/models/iris_classifier/generate", {"input": [1, 2, 3]}, 400, "proper shape"),
        (
            "/v2/models/iris_classifier/generate",
            {"input": ["a"] * 4},
            400,
            "Unable to parse 'data': attempt to access JSON non-number as double",
        ),
        ("/v2/models/iris_classifier/generate", [1], 400, "attempt to get members for non-object"),
        ("/v2/models/iris_classifier/generate", b"{", 400, "failed to parse the request JSON"),
        ("/v2/models/add_sub/generate", {"INPUT0": [1.0]}, 400, "missing required input"),
        ("/v2/models/nope/generate_stream", {"x": 1}, 404, "unknown model"),
    ],
)
def test_generate_errors(
    gateway: GatewayProcess, path: str, body: object, status: int, fragment: str
) -> None:
    reply = post(gateway, path, body)
    assert reply.status == status, reply
    assert reply.headers["content-type"] == "application/json"
    assert fragment in reply.error


# --------------------------------------------------------------------------- model management


@pytest.fixture(scope="module")
def explicit(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    """A service in explicit control mode (nothing loaded) behind its own gateway."""
    repo: Path = tmp_path_factory.mktemp("explicit_repo")
    for name in ("ident_a", "ident_b"):
        models.write_model(
            repo,
            name,
            models.identity_model("FP32", ["batch", 2]),
            models.make_config(
                name, [("INPUT0", "FP32", [2])], [("OUTPUT0", "FP32", [2])], max_batch_size=4
            ),
        )
    server = ServerProcess([repo], extra_args=["--model-control-mode", "explicit"]).start()
    try:
        with running_gateway(server.url) as gw:
            yield gw
    finally:
        assert server.stop() == 0, server.log


def _ident_infer(gw: GatewayProcess, name: str) -> Reply:
    body = {"inputs": [{"name": "INPUT0", "shape": [1, 2], "datatype": "FP32", "data": [3, 4]}]}
    return post(gw, f"/v2/models/{name}/infer", body)


def test_load_and_unload(explicit: GatewayProcess) -> None:
    assert get(explicit, "/v2/models/ident_a/ready").status == 400
    index = post(explicit, "/v2/repository/index").json()
    # Never loaded: no version; empty strings are left out, as in Triton's index.
    assert [(e["name"], "version" in e, "reason" in e) for e in index] == [
        ("ident_a", False, False),
        ("ident_b", False, False),
    ]
    reply = post(explicit, "/v2/repository/models/ident_a/load")
    assert (reply.status, reply.body) == (200, b"")
    assert get(explicit, "/v2/models/ident_a/ready").status == 200
    assert _ident_infer(explicit, "ident_a").json()["outputs"][0]["data"] == [3.0, 4.0]
    reply = post(
        explicit,
        "/v2/repository/models/ident_a/unload",
        {"parameters": {"unload_dependents": True}},
    )
    assert (reply.status, reply.body) == (200, b"")
    assert get(explicit, "/v2/models/ident_a/ready").status == 400
    states = {e["name"]: e.get("state") for e in post(explicit, "/v2/repository/index").json()}
    assert states["ident_a"] == "UNAVAILABLE"
    assert post(explicit, "/v2/repository/index", {"ready": True}).json() == []


def test_load_with_config_override(explicit: GatewayProcess) -> None:
    config = {
        "name": "ident_b",
        "platform": "onnxruntime_onnx",
        "max_batch_size": 2,
        "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [2]}],
        "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [2]}],
    }
    reply = post(
        explicit,
        "/v2/repository/models/ident_b/load",
        {"parameters": {"config": json.dumps(config)}},
    )
    assert reply.status == 200, reply
    assert get(explicit, "/v2/models/ident_b/config").json()["max_batch_size"] == 2
    assert post(explicit, "/v2/repository/models/ident_b/unload").status == 200


def test_load_with_files(explicit: GatewayProcess) -> None:
    """A new model sent in the request: config JSON plus file:<version>/<name> in base64."""
    onnx_bytes = models.identity_model("FP32", ["batch", 2]).SerializeToString()
    config = {
        "name": "sent",
        "platform": "onnxruntime_onnx",
        "max_batch_size": 4,
        "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [2]}],
        "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [2]}],
    }
    params = {
        "config": json.dumps(config),
        "file:1/model.onnx": base64.b64encode(onnx_bytes).decode(),
    }
    reply = post(explicit, "/v2/repository/models/sent/load", {"parameters": params})
    assert reply.status == 200, reply
    assert _ident_infer(explicit, "sent").json()["outputs"][0]["data"] == [3.0, 4.0]
    reply = post(
        explicit, "/v2/repository/models/sent/load", {"parameters": {"file:1/model.onnx": "%%%"}}
    )
    assert reply.status == 400 and "base64" in reply.error
    reply = post(explicit, "/v2/repository/models/sent/load", {"parameters": {"config": 5}})
    assert reply.status == 400
    assert post(explicit, "/v2/repository/models/sent/unload").status == 200


def test_load_unknown_model(explicit: GatewayProcess) -> None:
    """Triton's answer: INTERNAL from its core, which its HTTP frontend sends as 500."""
    reply = post(explicit, "/v2/repository/models/missing/load")
    assert reply.status == 500, reply
    assert reply.error == "failed to load 'missing', failed to poll from model repository"


@pytest.mark.parametrize(
    ("name", "status", "error"),
    [
        (
            "file:" + "A" * 256,
            "500",
            "failed to load 'ident_a', failed to poll from model repository: file name '"
            + "A" * 256
            + "' has a part longer than 255 bytes, the file system's limit",
        ),
        (
            "file:1/../../x",
            "500",
            "failed to load 'ident_a', failed to poll from model repository: "
            "file name '1/../../x' must stay within the model directory",
        ),
        (
            "file:1/./x",
            "400",
            "failed to load 'ident_a': file name '1/./x' must not contain '.', '..' or empty parts",
        ),
    ],
    ids=["part-too-long", "escape", "dot-part"],
)
def test_load_with_bad_file_names_tritonclient(
    explicit: GatewayProcess, name: str, status: str, error: str
) -> None:
    """tritonclient.http as Triton's L0_http test_load_oversized_file_parameter sends it: a
    file the localize step cannot write fails Triton's poll (500, its text; here the file
    is named after it); a name only this server refuses is a 400. The model stays unloaded."""
    client = httpclient.InferenceServerClient(explicit.url)
    try:
        with pytest.raises(InferenceServerException) as info:
            client.load_model("ident_a", config="{}", files={name: b"a"})
        assert (info.value.status(), info.value.message()) == (status, error)
        assert client.is_server_live()
        assert not client.is_model_ready("ident_a")
    finally:
        client.close()


# --------------------------------------------------------------------------- shm, trace, logging
# On the module's own service (fixture "explicit"): these calls change server settings.

SETTINGS_CALLS = [
    ("GET", "/v2/systemsharedmemory/status", None),
    ("GET", "/v2/systemsharedmemory/region/r0/status", None),
    ("POST", "/v2/systemsharedmemory/region/r0/register", {"key": "/k", "byte_size": 64}),
    ("POST", "/v2/systemsharedmemory/unregister", None),
    ("POST", "/v2/systemsharedmemory/region/r0/unregister", None),
    ("GET", "/v2/cudasharedmemory/status", None),
    ("GET", "/v2/cudasharedmemory/region/r0/status", None),
    (
        "POST",
        "/v2/cudasharedmemory/region/r0/register",
        {"raw_handle": {"b64": "AAAA"}, "device_id": 0, "byte_size": 64},
    ),
    ("POST", "/v2/cudasharedmemory/unregister", None),
    ("POST", "/v2/cudasharedmemory/region/r0/unregister", None),
    ("GET", "/v2/trace/setting", None),
    ("POST", "/v2/trace/setting", {"trace_level": ["OFF"], "trace_rate": "1000"}),
    ("GET", "/v2/models/ident_a/trace/setting", None),
    ("POST", "/v2/models/ident_a/trace/setting", {"trace_file": None}),
    ("GET", "/v2/logging", None),
    ("POST", "/v2/logging", {"log_info": True, "log_verbose_level": 0}),
]


@pytest.mark.parametrize(("method", "path", "body"), SETTINGS_CALLS)
def test_shared_memory_trace_and_logging_routes(
    explicit: GatewayProcess, method: str, path: str, body: object
) -> None:
    """Bodies are translated (a bad one is a 400, see test_gateway_errors.py); the service
    then answers, or refuses (a region that does not exist, a model not loaded; a key no
    shared-memory object has is Triton's INTERNAL, 500)."""
    reply = http_request(explicit.url, method, path, body)
    if reply.status == 500:
        assert reply.error == "Unable to open shared memory region: '/k'", reply
        return
    if reply.status != 200:
        assert reply.status in (400, 404), reply
        assert reply.error
        return
    if path.endswith("/status"):
        assert isinstance(reply.json(), list)  # Triton: an array of regions
    elif "register" in path:
        assert reply.body == b""
    else:
        assert isinstance(reply.json(), dict)  # settings as a flat object


def test_log_settings_shape(explicit: GatewayProcess) -> None:
    reply = get(explicit, "/v2/logging")
    if reply.status == 501:
        pytest.skip("the service does not implement LogSettings yet")
    settings = reply.json()
    assert set(settings) >= {"log_info", "log_warning", "log_error", "log_verbose_level"}
    assert isinstance(settings["log_info"], bool)
    assert isinstance(settings["log_verbose_level"], int)
