"""The generic JSON mapping, compression, the error table and the OpenAPI document."""

from __future__ import annotations

import base64
import gzip
import zlib
from typing import Any

import grpc
import pytest

from gateway import compression
from gateway.compression import choose_encoding, compress, decompress
from gateway.errors import HTTP_STATUS, GatewayError, http_status, rpc_error
from gateway.openapi import docs_page, openapi_document
from gateway.protojson import build_request, render_response
from gateway.routes import Route, load_routes
from inference import grpc_service_pb2 as pb
from inference import model_config_pb2 as mc

ROUTES = {r.rpc: r for r in load_routes()}


def _build(rpc: str, body: Any, path: dict[str, str] | None = None, binding: int = 0) -> Any:
    route = ROUTES[rpc]
    return build_request(route, route.bindings[binding], path or {}, body)


# --------------------------------------------------------------------------- requests


def test_path_variables_and_body_fill_the_request() -> None:
    request = _build("RepositoryIndex", {"ready": True}, {"repository_name": "r"}, 1)
    assert (request.repository_name, request.ready) == ("r", True)
    request = _build("ModelMetadata", None, {"name": "m", "version": "2"}, 1)
    assert (request.name, request.version) == ("m", "2")


def test_load_parameters_by_json_type() -> None:
    onnx = b"\x08\x07binary"
    request = _build(
        "RepositoryModelLoad",
        {
            "parameters": {
                "config": "{}",
                "file:1/model.onnx": base64.b64encode(onnx).decode(),
                "flag": True,
                "n": 3,
            }
        },
        {"model_name": "m"},
    )
    params = request.parameters
    assert params["config"].string_param == "{}"
    assert params["file:1/model.onnx"].bytes_param == onnx
    assert params["flag"].bool_param is True
    assert params["n"].int64_param == 3


def test_shared_memory_and_settings_bodies() -> None:
    request = _build(
        "CudaSharedMemoryRegister",
        {"raw_handle": {"b64": "AAEC"}, "device_id": 1, "byte_size": 64},
        {"name": "r"},
    )
    assert (request.raw_handle, request.device_id, request.byte_size) == (b"\0\1\2", 1, 64)
    trace = _build(
        "TraceSetting",
        {"trace_level": ["TIMESTAMPS", "TENSORS"], "trace_rate": "5", "trace_file": None},
        binding=1,
    )
    assert list(trace.settings["trace_level"].value) == ["TIMESTAMPS", "TENSORS"]
    assert list(trace.settings["trace_rate"].value) == ["5"]
    assert list(trace.settings["trace_file"].value) == []  # null clears, as in Triton
    logs = _build(
        "LogSettings",
        {"log_info": False, "log_verbose_level": 2, "log_format": "ISO8601"},
        binding=1,
    )
    assert logs.settings["log_info"].bool_param is False
    assert logs.settings["log_verbose_level"].uint32_param == 2
    assert logs.settings["log_format"].string_param == "ISO8601"


@pytest.mark.parametrize(
    ("rpc", "body", "fragment"),
    [
        ("RepositoryIndex", {"ready": 1}, "wrong type"),
        ("RepositoryIndex", {"extra": 1}, "unknown field 'extra'"),
        ("RepositoryIndex", [], "must be a JSON object"),
        ("RepositoryModelLoad", {"parameters": {"x": None}}, "must be one of"),
        ("RepositoryModelLoad", {"parameters": {"file:1/a": "not base64!"}}, "not valid base64"),
        ("RepositoryModelLoad", {"model_name": "other"}, "unknown field 'model_name'"),
        ("SystemSharedMemoryRegister", {"offset": 2**64}, "out of range"),
        ("SystemSharedMemoryRegister", {"key": 5}, "wrong type"),
        ("LogSettings", {"log_verbose_level": -1}, "must be one of"),
    ],
)
def test_bad_bodies_are_400(rpc: str, body: Any, fragment: str) -> None:
    route = ROUTES[rpc]
    binding = next(b for b in route.bindings if b.body)
    path = dict.fromkeys(binding.variables, "x")
    with pytest.raises(GatewayError) as info:
        build_request(route, binding, path, body)
    assert info.value.status == 400
    assert fragment in info.value.message


# --------------------------------------------------------------------------- responses


def test_render_uses_proto_names_and_integer_numbers() -> None:
    response = pb.ModelConfigResponse(
        config=mc.ModelConfig(
            name="m",
            max_batch_size=8,
            input=[mc.ModelInput(name="x", data_type=mc.TYPE_FP32, dims=[-1, 3])],
        )
    )
    config = render_response(ROUTES["ModelConfig"], response)
    assert config["max_batch_size"] == 8
    assert config["input"][0]["dims"] == [-1, 3]
    assert config["input"][0]["data_type"] == "TYPE_FP32"
    assert config["input"][0]["optional"] is False  # fields without presence always written
    assert "dynamic_batching" not in config  # unset messages are not


def test_render_index_omits_defaults() -> None:
    response = pb.RepositoryIndexResponse(
        models=[
            pb.RepositoryIndexResponse.ModelIndex(name="a", version="1", state="READY"),
            pb.RepositoryIndexResponse.ModelIndex(name="b", state="UNAVAILABLE", reason="bad"),
        ]
    )
    assert render_response(ROUTES["RepositoryIndex"], response) == [
        {"name": "a", "version": "1", "state": "READY"},
        {"name": "b", "state": "UNAVAILABLE", "reason": "bad"},
    ]


def test_render_shared_memory_status_as_a_list() -> None:
    response = pb.SystemSharedMemoryStatusResponse()
    response.regions["b"].CopyFrom(
        pb.SystemSharedMemoryStatusResponse.RegionStatus(
            name="b", key="/k", offset=0, byte_size=2**40
        )
    )
    assert render_response(ROUTES["SystemSharedMemoryStatus"], response) == [
        {"name": "b", "key": "/k", "offset": 0, "byte_size": 2**40}
    ]


def test_render_settings_as_triton_writes_them() -> None:
    trace = pb.TraceSettingResponse()
    trace.settings["trace_level"].value.append("TIMESTAMPS")
    trace.settings["trace_rate"].value.append("1000")
    assert render_response(ROUTES["TraceSetting"], trace) == {
        "trace_level": ["TIMESTAMPS"],
        "trace_rate": "1000",
    }
    logs = pb.LogSettingsResponse()
    logs.settings["log_info"].bool_param = True
    logs.settings["log_verbose_level"].uint32_param = 0
    assert render_response(ROUTES["LogSettings"], logs) == {
        "log_info": True,
        "log_verbose_level": 0,
    }


def test_render_statistics_nested() -> None:
    response = pb.ModelStatisticsResponse(
        model_stats=[
            pb.ModelStatistics(
                name="m",
                version="1",
                inference_count=2**40,
                inference_stats=pb.InferStatistics(success=pb.StatisticDuration(count=1, ns=5)),
            )
        ]
    )
    (stats,) = render_response(ROUTES["ModelStatistics"], response)["model_stats"]
    assert stats["inference_count"] == 2**40
    assert stats["inference_stats"]["success"] == {"count": 1, "ns": 5}
    assert stats["batch_stats"] == [] and stats["response_stats"] == {}


# --------------------------------------------------------------------------- compression


@pytest.mark.parametrize(
    ("header", "chosen"),
    [
        (None, None),
        ("", None),
        ("gzip", "gzip"),
        ("deflate, gzip", "deflate"),
        ("gzip;q=0.5, deflate;q=0.8", "deflate"),
        ("identity, gzip", None),
        ("br", None),
        ("gzip;q=abc, deflate", "deflate"),
        ("identity;q=0.1, gzip;q=0.2", "gzip"),
    ],
)
def test_choose_encoding(header: str | None, chosen: str | None) -> None:
    assert choose_encoding(header) == chosen


def test_compress_and_decompress() -> None:
    body = b"x" * 10_000
    assert gzip.decompress(compress(body, "gzip")) == body
    assert zlib.decompress(compress(body, "deflate")) == body
    assert decompress(gzip.compress(body), "gzip", 20_000) == body
    assert decompress(zlib.compress(body), "deflate", 20_000) == body
    raw_deflate = zlib.compressobj(wbits=-15)
    assert decompress(raw_deflate.compress(body) + raw_deflate.flush(), "deflate", 20_000) == body
    assert decompress(body, "identity", 1) == body  # not inflated: the body limit is elsewhere
    with pytest.raises(GatewayError) as info:
        decompress(gzip.compress(body), "gzip", 9_999)
    assert info.value.status == 413
    with pytest.raises(GatewayError) as info:
        decompress(b"junk", "gzip", 100)
    assert info.value.status == 400
    with pytest.raises(GatewayError) as info:
        decompress(body, "br", 100)
    assert info.value.status == 415 and dict(info.value.headers)["accept-encoding"]


def _bomb(encoding: str, inflated: int) -> bytes:
    """``inflated`` zero bytes, compressed at the best ratio deflate has (~1000:1)."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 31 if encoding == "gzip" else 15)
    block = bytes(1 << 20)
    return b"".join(packer.compress(block) for _ in range(inflated >> 20)) + packer.flush()


_DECOMPRESSOBJ = zlib.decompressobj


class _CountingInflater:
    """Wraps zlib.decompressobj to count what it inflates."""

    produced = 0

    def __init__(self, wbits: int) -> None:
        self._inner = _DECOMPRESSOBJ(wbits)

    def decompress(self, data: bytes, max_length: int = 0) -> bytes:
        out = self._inner.decompress(data, max_length)
        _CountingInflater.produced += len(out)
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


@pytest.fixture
def counting(monkeypatch: pytest.MonkeyPatch) -> type[_CountingInflater]:
    monkeypatch.setattr(compression.zlib, "decompressobj", _CountingInflater)
    _CountingInflater.produced = 0
    return _CountingInflater


def test_a_gzip_bomb_is_refused_from_its_trailer_before_inflating(
    counting: type[_CountingInflater],
) -> None:
    with pytest.raises(GatewayError) as info:
        decompress(_bomb("gzip", 64 << 20), "gzip", 8 << 20)
    assert info.value.status == 413 and "--http-max-body-bytes" in info.value.message
    assert counting.produced == 0


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
def test_inflating_stops_at_the_limit(encoding: str, counting: type[_CountingInflater]) -> None:
    """A deflate bomb, or a gzip one whose trailer lies: inflated only to the limit (plus
    one step), never in full; was: the whole limit at once, then a copy of it."""
    body = _bomb(encoding, 64 << 20)
    if encoding == "gzip":
        body = body[:-4] + (1).to_bytes(4, "little")  # ISIZE says 1 byte
    with pytest.raises(GatewayError) as info:
        decompress(body, encoding, 8 << 20)
    assert info.value.status == 413
    assert counting.produced <= (8 << 20) + compression._PIECE


def test_multi_member_gzip_and_truncated_streams() -> None:
    assert decompress(gzip.compress(b"ab") + gzip.compress(b"cd"), "gzip", 100) == b"abcd"
    big = bytes(range(256)) * 20_000  # more than one inflating step
    assert decompress(gzip.compress(big), "gzip", len(big)) == big
    assert decompress(zlib.compress(big), "deflate", len(big)) == big
    for encoding, packed in (("gzip", gzip.compress(big)), ("deflate", zlib.compress(big))):
        with pytest.raises(GatewayError) as info:
            decompress(packed[: len(packed) // 2], encoding, len(big))
        assert info.value.status == 400 and "malformed" in info.value.message, encoding


# --------------------------------------------------------------------------- errors


def test_error_table_is_tritons() -> None:
    assert http_status(grpc.StatusCode.INVALID_ARGUMENT) == 400
    assert http_status(grpc.StatusCode.ALREADY_EXISTS) == 400
    assert http_status(grpc.StatusCode.CANCELLED) == 400
    assert http_status(grpc.StatusCode.UNKNOWN) == 400
    assert http_status(grpc.StatusCode.NOT_FOUND) == 404
    assert http_status(grpc.StatusCode.UNAVAILABLE) == 503
    assert http_status(grpc.StatusCode.UNIMPLEMENTED) == 501
    assert http_status(grpc.StatusCode.INTERNAL) == 500
    assert http_status(grpc.StatusCode.FAILED_PRECONDITION) == 400  # Triton's default
    assert all(400 <= s < 600 for s in HTTP_STATUS.values())


class _RpcError(grpc.aio.AioRpcError):
    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details)


def test_rpc_errors_keep_the_service_message() -> None:
    error = rpc_error(_RpcError(grpc.StatusCode.UNAVAILABLE, "model 'm' is not ready"), "h:1")
    assert (error.status, error.message) == (503, "model 'm' is not ready")
    error = rpc_error(
        _RpcError(grpc.StatusCode.UNAVAILABLE, "failed to connect to all addresses"), "h:1"
    )
    assert error.status == 503 and error.message.startswith(
        "inference service at h:1 is unavailable"
    )


# --------------------------------------------------------------------------- OpenAPI


def _walk_refs(value: Any, refs: set[str]) -> None:
    if isinstance(value, dict):
        if "$ref" in value:
            refs.add(value["$ref"].rsplit("/", 1)[1])
        for item in value.values():
            _walk_refs(item, refs)
    elif isinstance(value, list):
        for item in value:
            _walk_refs(item, refs)


def test_openapi_document_covers_every_binding() -> None:
    routes: list[Route] = load_routes()
    doc = openapi_document(routes, "1.2.3")
    assert doc["info"]["version"] == "1.2.3"
    bindings = {(b.method.lower(), b.template) for r in routes for b in r.bindings}
    documented = {(m, p) for p, ops in doc["paths"].items() for m in ops}
    assert bindings == documented
    refs: set[str] = set()
    _walk_refs(doc, refs)
    assert refs <= set(doc["components"]["schemas"])  # every $ref resolves
    ids = [op["operationId"] for ops in doc["paths"].values() for op in ops.values()]
    assert len(ids) == len(set(ids))
    load = doc["paths"]["/v2/repository/models/{model_name}/load"]["post"]
    body = load["requestBody"]["content"]["application/json"]["schema"]
    assert "model_name" not in body["properties"]  # bound by the path
    assert b"/v2/models/{model_name}/infer" in docs_page(doc)
