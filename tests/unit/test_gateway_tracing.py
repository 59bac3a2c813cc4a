"""The gateway's own spans in-process: the ASGI app in front of a fake gRPC servicer that
records each call's metadata, spans captured by the SDK's in-memory exporter.

Checks the span tree (SERVER span under the caller's traceparent, translation children),
that the service is handed the gateway span's context, error spans, streams, sampling,
the off path (headers forwarded unchanged, no SDK provider), the flags, and that the
gateway follows TraceSetting calls made through it (global and per model, GET and POST;
the fake servicer answers them with the service's own ``Tracing``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import AsyncIterator
from typing import Any

import grpc
import numpy as np
import pytest
from gateway_http import call, close_servers  # noqa: F401  (the autouse fixture)
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from gateway.app import GatewayApp
from gateway.config import GatewayConfig, parse_args
from gateway.tracing import Tracing
from inference import grpc_service_pb2 as pb
from inference import grpc_service_pb2_grpc as pb_grpc
from inference import model_config_pb2 as mc
from service.errors import ServerError
from service.telemetry.tracing import Tracing as ServiceTracing
from wire.tracing import TRACE_EXPORTERS, TraceSettings, make_exporter, parse_trace_config

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"
SAMPLED = {"traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01", "tracestate": "vendor=abc"}
UNSAMPLED = {"traceparent": f"00-{TRACE_ID}-{PARENT_ID}-00"}
INFER = json.dumps(
    {"inputs": [{"name": "X", "shape": [2], "datatype": "FP32", "data": [1, 2.5]}]}
).encode()


class RecordingService(pb_grpc.GRPCInferenceServiceServicer):
    """Records (rpc, metadata) of each call; model ``missing`` is NOT_FOUND (infer) or
    INVALID_ARGUMENT (TraceSetting, as the service answers for an unknown model)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, str]]] = []
        # The service's own settings logic (its spans go nowhere: nothing is traced here).
        self.trace = ServiceTracing(TraceSettings(), SimpleSpanProcessor(InMemorySpanExporter()))

    async def TraceSetting(
        self, request: pb.TraceSettingRequest, context: Any
    ) -> pb.TraceSettingResponse:
        self._record("TraceSetting", context)
        if request.model_name == "missing":
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "unknown model : missing")
        changes = {name: list(value.value) for name, value in request.settings.items()}
        try:
            settings = self.trace.update(changes, request.model_name)
        except ServerError as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        response = pb.TraceSettingResponse()
        for name, values in settings.items():
            response.settings[name].value.extend(values)
        return response

    def _record(self, rpc: str, context: Any) -> None:
        self.calls.append((rpc, {k: str(v) for k, v in context.invocation_metadata()}))

    async def ServerReady(self, request: Any, context: Any) -> pb.ServerReadyResponse:
        self._record("ServerReady", context)
        return pb.ServerReadyResponse(ready=True)

    async def ModelInfer(self, request: pb.ModelInferRequest, context: Any) -> Any:
        self._record("ModelInfer", context)
        if request.model_name == "missing":
            await context.abort(grpc.StatusCode.NOT_FOUND, "Request for unknown model 'missing'")
        data = np.frombuffer(request.raw_input_contents[0], np.float32) * 2
        response = pb.ModelInferResponse(model_name=request.model_name, model_version="1")
        response.outputs.add(name="Y", datatype="FP32", shape=request.inputs[0].shape)
        response.raw_output_contents.append(data.tobytes())
        return response

    async def ModelMetadata(self, request: Any, context: Any) -> pb.ModelMetadataResponse:
        self._record("ModelMetadata", context)
        meta = pb.ModelMetadataResponse(name=request.name, versions=["1"])
        meta.inputs.add(name="n", datatype="INT32", shape=[1])
        return meta

    async def ModelConfig(self, request: Any, context: Any) -> pb.ModelConfigResponse:
        self._record("ModelConfig", context)
        response = pb.ModelConfigResponse()
        response.config.name = request.name
        response.config.input.add(name="n", data_type=mc.TYPE_INT32, dims=[-1])
        return response

    async def ModelStreamInfer(self, requests: Any, context: Any) -> AsyncIterator[Any]:
        self._record("ModelStreamInfer", context)
        async for request in requests:
            count = int(np.frombuffer(request.raw_input_contents[0], np.int32)[0])
            for index in range(count):
                response = pb.ModelInferResponse(model_name=request.model_name, model_version="1")
                response.parameters["triton_final_response"].bool_param = index == count - 1
                response.outputs.add(name="i", datatype="INT32", shape=[1])
                response.raw_output_contents.append(np.array([index], np.int32).tobytes())
                yield pb.ModelStreamInferResponse(infer_response=response)
                await asyncio.sleep(0.01)


@dataclasses.dataclass
class Rig:
    app: GatewayApp
    service: RecordingService
    exporter: InMemorySpanExporter

    def spans(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())

    def server_spans(self) -> list[ReadableSpan]:
        return [s for s in self.spans() if s.kind == SpanKind.SERVER]

    def metadata(self, rpc: str) -> dict[str, str]:
        (md,) = [md for name, md in self.service.calls if name == rpc]
        return md


async def _rig(trace: TraceSettings) -> tuple[Rig, Any]:
    service = RecordingService()
    server = grpc.aio.server()
    pb_grpc.add_GRPCInferenceServiceServicer_to_server(service, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    app = GatewayApp(GatewayConfig(grpc_target=f"127.0.0.1:{port}", trace=trace))
    exporter = InMemorySpanExporter()
    app.tracing = Tracing(trace, SimpleSpanProcessor(exporter))
    app.startup()
    return Rig(app, service, exporter), server


@pytest.fixture
async def rig() -> AsyncIterator[Rig]:
    rig, server = await _rig(TraceSettings(level="TIMESTAMPS", rate=1))
    try:
        yield rig
    finally:
        rig.app.shutdown()
        await server.stop(None)


def _hex(value: int, width: int) -> str:
    return format(value, f"0{width}x")


async def test_infer_span_tree_and_propagation(rig: Rig) -> None:
    status, _, body = await call(rig.app, "POST", "/v2/models/m/infer", INFER, SAMPLED)
    assert status == 200, body
    (server,) = rig.server_spans()
    assert server.name == "POST /v2/models/{model_name}/infer"
    assert _hex(server.context.trace_id, 32) == TRACE_ID
    assert server.parent is not None and _hex(server.parent.span_id, 16) == PARENT_ID
    assert server.parent.is_remote
    assert dict(server.attributes or {}) == {
        "http.request.method": "POST",
        "http.route": "/v2/models/{model_name}/infer",
        "url.path": "/v2/models/m/infer",
        "triton.model_name": "m",
        "triton.model_version": "",
        "http.response.status_code": 200,
    }
    assert server.status.status_code == StatusCode.UNSET
    assert server.resource.attributes["service.name"] == "triton-compatible-gateway"
    children = [s for s in rig.spans() if s.kind == SpanKind.INTERNAL]
    assert [s.name for s in children] == ["translate_request", "translate_response"]
    for child in children:
        assert child.parent is not None and child.parent.span_id == server.context.span_id
        assert child.context.trace_id == server.context.trace_id
    # The service gets the gateway span as its parent, with the caller's tracestate.
    md = rig.metadata("ModelInfer")
    assert md["traceparent"] == f"00-{TRACE_ID}-{_hex(server.context.span_id, 16)}-01"
    assert md["tracestate"] == "vendor=abc"


async def test_versioned_route_and_binary_header_only_request(rig: Rig) -> None:
    """The raw binary form makes a ModelConfig call first: it carries the same context."""
    data = np.array([4], np.int32).tobytes()
    headers = {"inference-header-content-length": "0", **SAMPLED}
    path = "/v2/models/m/versions/1/infer"
    status, _, body = await call(rig.app, "POST", path, data, headers)
    assert status == 200, body
    (server,) = rig.server_spans()
    assert server.name == "POST /v2/models/{model_name}/versions/{model_version}/infer"
    assert (server.attributes or {})["triton.model_version"] == "1"
    own = f"00-{TRACE_ID}-{_hex(server.context.span_id, 16)}-01"
    assert rig.metadata("ModelConfig")["traceparent"] == own
    assert rig.metadata("ModelInfer")["traceparent"] == own


async def test_without_traceparent_the_span_is_a_root(rig: Rig) -> None:
    assert (await call(rig.app, "POST", "/v2/models/m/infer", INFER))[0] == 200
    (server,) = rig.server_spans()
    assert server.parent is None
    trace_id, span_id = _hex(server.context.trace_id, 32), _hex(server.context.span_id, 16)
    version, sent_trace, sent_parent, flags = rig.metadata("ModelInfer")["traceparent"].split("-")
    assert (version, sent_trace, sent_parent) == ("00", trace_id, span_id)
    assert int(flags, 16) & 1  # sampled (the SDK may also set W3C's "random" flag)
    assert "tracestate" not in rig.metadata("ModelInfer")


async def test_rpc_failure_is_an_error_span(rig: Rig) -> None:
    status, _, body = await call(rig.app, "POST", "/v2/models/missing/infer", INFER, SAMPLED)
    assert status == 404, body
    (server,) = rig.server_spans()
    assert server.status.status_code == StatusCode.ERROR
    assert server.status.description == "Request for unknown model 'missing'"
    assert (server.attributes or {})["http.response.status_code"] == 404
    # Translated before the call; no response to translate.
    assert [s.name for s in rig.spans() if s.kind == SpanKind.INTERNAL] == ["translate_request"]


async def test_bad_request_is_an_error_span_without_rpc(rig: Rig) -> None:
    status, _, _ = await call(rig.app, "POST", "/v2/models/m/infer", b"{", SAMPLED)
    assert status == 400
    (server,) = rig.server_spans()
    assert server.status.status_code == StatusCode.ERROR
    assert "failed to parse the request JSON" in (server.status.description or "")
    assert rig.service.calls == []


async def test_generate_stream_span_ends_with_the_stream(rig: Rig) -> None:
    path = "/v2/models/m/generate_stream"
    status, _, body = await call(rig.app, "POST", path, b'{"n": 3}', SAMPLED)
    assert status == 200 and body.count(b"data: ") == 3
    (server,) = rig.server_spans()
    assert server.name == "POST /v2/models/{model_name}/generate_stream"
    assert server.end_time is not None and server.start_time is not None
    assert server.end_time - server.start_time >= 20_000_000  # three responses, 10 ms apart
    own = _hex(server.context.span_id, 16)
    assert rig.metadata("ModelStreamInfer")["traceparent"].split("-")[2] == own
    status, _, _ = await call(rig.app, "POST", "/v2/models/m/generate", b'{"n": 1}', SAMPLED)
    assert status == 200
    names = [s.name for s in rig.spans() if s.kind == SpanKind.INTERNAL]
    assert names == ["translate_request", "translate_request", "translate_response"]


async def test_only_inference_routes_are_traced(rig: Rig) -> None:
    assert (await call(rig.app, "GET", "/v2/health/ready", headers=SAMPLED))[0] == 200
    assert rig.spans() == []
    assert rig.metadata("ServerReady")["traceparent"] == SAMPLED["traceparent"]


async def test_sampling_rate_and_count() -> None:
    rig, server = await _rig(TraceSettings(level="TIMESTAMPS", rate=2, count=3))
    try:
        for _ in range(4):  # no caller context: 1 in 2 (the 2nd and the 4th, as Triton)
            assert (await call(rig.app, "POST", "/v2/models/m/infer", INFER))[0] == 200
        assert len(rig.server_spans()) == 2
        # An unsampled caller context counts against the rate; when not traced its headers
        # go on unchanged.
        for _ in range(2):
            assert (await call(rig.app, "POST", "/v2/models/m/infer", INFER, UNSAMPLED))[0] == 200
        assert len(rig.server_spans()) == 3  # the count (3) is spent
        forwarded = [md.get("traceparent") for rpc, md in rig.service.calls[-2:]]
        assert forwarded[0] == UNSAMPLED["traceparent"]  # the 5th: not traced
        assert (await call(rig.app, "POST", "/v2/models/m/infer", INFER, SAMPLED))[0] == 200
        assert len(rig.server_spans()) == 3
        assert rig.service.calls[-1][1]["traceparent"] == SAMPLED["traceparent"]
    finally:
        rig.app.shutdown()
        await server.stop(None)


async def test_a_sampled_caller_is_always_followed() -> None:
    rig, server = await _rig(TraceSettings(level="TIMESTAMPS", rate=1000))
    try:
        for _ in range(3):
            assert (await call(rig.app, "POST", "/v2/models/m/infer", INFER, SAMPLED))[0] == 200
        assert len(rig.server_spans()) == 3
    finally:
        rig.app.shutdown()
        await server.stop(None)


async def test_off_forwards_headers_unchanged_and_builds_no_provider() -> None:
    rig, server = await _rig(TraceSettings())
    try:
        assert not rig.app.tracing.active
        assert (await call(rig.app, "POST", "/v2/models/m/infer", INFER, SAMPLED))[0] == 200
        md = rig.metadata("ModelInfer")
        assert (md["traceparent"], md["tracestate"]) == (SAMPLED["traceparent"], "vendor=abc")
        assert rig.spans() == []
        assert rig.app.tracing._provider is None
    finally:
        rig.app.shutdown()
        await server.stop(None)


async def test_shutdown_flushes_the_batch_exporter() -> None:
    """Spans wait in a BatchSpanProcessor (5 s schedule); the app's shutdown exports them."""
    rig, server = await _rig(TraceSettings(level="TIMESTAMPS", rate=1))
    exporter = InMemorySpanExporter()
    rig.app.tracing = Tracing(rig.app.config.trace, BatchSpanProcessor(exporter))
    rig.app.tracing.start()
    try:
        assert (await call(rig.app, "POST", "/v2/models/m/infer", INFER))[0] == 200
        assert exporter.get_finished_spans() == ()  # still queued
    finally:
        rig.app.shutdown()
        await server.stop(None)
    assert {s.name for s in exporter.get_finished_spans()} == {
        "POST /v2/models/{model_name}/infer",
        "translate_request",
        "translate_response",
    }


def test_exporters_are_built_from_the_flags() -> None:
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
        OTLPSpanExporter as GrpcExporter,
    )
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import ConsoleSpanExporter

    for name, kind in (
        ("console", ConsoleSpanExporter),
        ("otlp-http", OTLPSpanExporter),
        ("otlp-grpc", GrpcExporter),
    ):
        exporter = make_exporter(TraceSettings(exporter=name, url="http://127.0.0.1:9/v1/traces"))
        try:
            assert isinstance(exporter, kind)
        finally:
            exporter.shutdown()


@pytest.mark.parametrize(
    ("specs", "expected"),
    [
        ([], TraceSettings()),
        (["level=TIMESTAMPS", "rate=5", "count=10"], TraceSettings("TIMESTAMPS", 5, 10)),
        (
            ["opentelemetry,exporter=console", "opentelemetry,url=collector:4318/v1/traces"],
            TraceSettings(exporter="console", url="http://collector:4318/v1/traces"),
        ),
        (
            ["mode=opentelemetry", "opentelemetry,resource=team=ml"],
            TraceSettings(resource=(("team", "ml"),)),
        ),
    ],
)
def test_trace_config_grammar(specs: list[str], expected: TraceSettings) -> None:
    """One grammar for both processes (wire.tracing), so one set of values sets both."""
    assert parse_trace_config(specs) == expected
    assert parse_args([f"--trace-config={spec}" for spec in specs]).trace == expected
    assert set(TRACE_EXPORTERS) == {"otlp-http", "otlp-grpc", "console"}


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        ("level=SOME", "level"),
        ("rate=0", "rate"),
        ("count=-2", "count"),
        ("opentelemetry,exporter=zipkin", "exporter"),
        ("zipkin,file=x", "trace mode"),
        ("level", "key=value"),
    ],
)
def test_bad_trace_config_exits_2(
    spec: str, fragment: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stopped:
        parse_args(["--trace-config", spec])
    assert stopped.value.code == 2
    assert fragment in capsys.readouterr().err


def test_trace_flags() -> None:
    assert not parse_args([]).trace.on
    config = parse_args(
        ["--trace-config=level=TIMESTAMPS", "--trace-config=rate=1", "--trace-config", "count=0"]
    ).trace
    assert (config.level, config.rate, config.count, config.on) == ("TIMESTAMPS", 1, 0, False)
    assert parse_args(["--trace-config=level=TIMESTAMPS"]).trace.on


# --- following TraceSetting calls made through the gateway ---------------------------------


@pytest.fixture
async def off_rig() -> AsyncIterator[Rig]:
    """A gateway started with tracing off (no --trace-config)."""
    rig, server = await _rig(TraceSettings())
    try:
        yield rig
    finally:
        rig.app.shutdown()
        await server.stop(None)


async def _set(rig: Rig, path: str, settings: dict[str, Any]) -> tuple[int, Any]:
    status, _, body = await call(rig.app, "POST", path, json.dumps(settings).encode())
    return status, json.loads(body)


async def _traced(rig: Rig, model: str, times: int = 1) -> int:
    """How many of ``times`` infer requests on ``model`` got a gateway span."""
    before = len(rig.server_spans())
    for _ in range(times):
        status, _, body = await call(rig.app, "POST", f"/v2/models/{model}/infer", INFER)
        assert status == 200, body
    return len(rig.server_spans()) - before


async def test_global_trace_setting_turns_gateway_spans_on_then_off(off_rig: Rig) -> None:
    tracing = off_rig.app.tracing
    assert not tracing.active and not tracing.started
    assert await _traced(off_rig, "m") == 0
    status, body = await _set(
        off_rig, "/v2/trace/setting", {"trace_level": ["TIMESTAMPS"], "trace_rate": "1"}
    )
    assert status == 200, body
    assert (body["trace_level"], body["trace_rate"]) == (["TIMESTAMPS"], "1")
    assert tracing.active and tracing.started  # built lazily, with the injected processor
    assert await _traced(off_rig, "m", 3) == 3
    (server,) = off_rig.server_spans()[-1:]
    sent = off_rig.service.calls[-1][1]["traceparent"]
    assert sent.split("-")[2] == _hex(server.context.span_id, 16)  # the service's parent

    status, body = await _set(off_rig, "/v2/trace/setting", {"trace_level": ["OFF"]})
    assert status == 200 and body["trace_level"] == ["OFF"], body
    assert not tracing.active  # the off path is one attribute check again
    assert await _traced(off_rig, "m", 3) == 0
    # Untraced again: the caller's headers reach the service unchanged.
    assert (await call(off_rig.app, "POST", "/v2/models/m/infer", INFER, SAMPLED))[0] == 200
    assert off_rig.service.calls[-1][1]["traceparent"] == SAMPLED["traceparent"]
    assert len(off_rig.server_spans()) == 3


async def test_trace_count_and_rate_from_the_service(off_rig: Rig) -> None:
    settings = {"trace_level": ["TIMESTAMPS"], "trace_rate": "2", "trace_count": "2"}
    assert (await _set(off_rig, "/v2/trace/setting", settings))[0] == 200
    assert off_rig.app.tracing.settings() == ("TIMESTAMPS", 2, 2)
    assert await _traced(off_rig, "m", 2) == 1  # 1 in 2
    assert await _traced(off_rig, "m", 6) == 1  # then the count (2) is spent
    assert off_rig.app.tracing.settings() == ("TIMESTAMPS", 2, 0)


async def test_get_applies_what_the_service_reports(off_rig: Rig) -> None:
    """Settings changed on the service some other way (a gRPC client) are taken up when
    read through the gateway."""
    off_rig.service.trace.update({"trace_level": ["TIMESTAMPS"], "trace_rate": ["1"]})
    assert not off_rig.app.tracing.active
    status, _, body = await call(off_rig.app, "GET", "/v2/trace/setting")
    assert status == 200 and json.loads(body)["trace_level"] == ["TIMESTAMPS"], body
    assert off_rig.app.tracing.active
    assert await _traced(off_rig, "m", 2) == 2


async def test_model_trace_setting_traces_that_model_only(off_rig: Rig) -> None:
    tracing = off_rig.app.tracing
    path = "/v2/models/a/trace/setting"
    status, body = await _set(off_rig, path, {"trace_level": ["TIMESTAMPS"], "trace_rate": "1"})
    assert status == 200 and body["trace_level"] == ["TIMESTAMPS"], body
    assert tracing.active
    assert await _traced(off_rig, "a", 2) == 2
    assert await _traced(off_rig, "b", 2) == 0  # global stays OFF
    (span,) = off_rig.server_spans()[-1:]
    assert (span.attributes or {})["triton.model_name"] == "a"
    # Reading the model's settings changes nothing.
    status, _, body_bytes = await call(off_rig.app, "GET", path)
    assert status == 200 and json.loads(body_bytes)["trace_rate"] == "1"
    assert await _traced(off_rig, "a") == 1

    # Cleared (JSON null: an empty list): model a inherits the global settings (OFF).
    status, body = await _set(off_rig, path, {"trace_level": None, "trace_rate": None})
    assert status == 200 and body["trace_level"] == ["OFF"], body
    assert not tracing.active
    assert tracing.settings("a") == tracing.settings()
    assert await _traced(off_rig, "a", 2) == 0


async def test_model_override_inherits_unset_values_from_global(off_rig: Rig) -> None:
    tracing = off_rig.app.tracing
    both = {"trace_level": ["TIMESTAMPS"], "trace_rate": "2"}
    assert (await _set(off_rig, "/v2/trace/setting", both))[0] == 200
    # Model a sets only its rate: its level is the global one.
    assert (await _set(off_rig, "/v2/models/a/trace/setting", {"trace_rate": "1"}))[0] == 200
    assert tracing.settings("a") == ("TIMESTAMPS", 1, -1)
    assert await _traced(off_rig, "a", 4) == 4
    assert await _traced(off_rig, "b", 4) == 2
    # A later global change reaches model a where it has no value of its own.
    assert (await _set(off_rig, "/v2/trace/setting", {"trace_level": ["OFF"]}))[0] == 200
    assert tracing.settings("a") == ("OFF", 1, -1)
    assert not tracing.active
    assert await _traced(off_rig, "a", 2) == 0
    # Model a turns itself back on, then drops its rate: the global 1 in 2 again.
    on = {"trace_level": ["TIMESTAMPS"]}
    assert (await _set(off_rig, "/v2/models/a/trace/setting", on))[0] == 200
    assert await _traced(off_rig, "a", 2) == 2
    assert (await _set(off_rig, "/v2/models/a/trace/setting", {"trace_rate": None}))[0] == 200
    assert tracing.settings("a") == ("TIMESTAMPS", 2, -1)
    assert await _traced(off_rig, "a", 4) == 2


@pytest.mark.parametrize(
    ("path", "settings"),
    [
        ("/v2/trace/setting", {"trace_level": ["TIMESTAMPS"], "trace_rate": "0"}),
        ("/v2/trace/setting", {"trace_level": ["TIMESTAMPS", "OFF"]}),
        ("/v2/models/a/trace/setting", {"trace_level": ["TIMESTAMPS"], "trace_count": "x"}),
        ("/v2/models/missing/trace/setting", {"trace_level": ["TIMESTAMPS"]}),
    ],
)
async def test_rejected_trace_setting_changes_nothing(
    off_rig: Rig, path: str, settings: dict[str, Any]
) -> None:
    tracing = off_rig.app.tracing
    status, body = await _set(off_rig, path, settings)
    assert status == 400, body
    assert not tracing.active and not tracing.started
    assert tracing.settings() == ("OFF", 1000, -1)
    assert tracing.settings("a") == tracing.settings()
    assert await _traced(off_rig, "a", 2) == 0


async def test_rejected_trace_setting_leaves_tracing_on(rig: Rig) -> None:
    status, body = await _set(
        rig, "/v2/trace/setting", {"trace_level": ["OFF"], "trace_rate": "-1"}
    )
    assert status == 400, body
    assert rig.app.tracing.settings() == ("TIMESTAMPS", 1, -1)
    assert await _traced(rig, "m", 2) == 2


def test_lazy_start_uses_the_gateways_exporter_flags() -> None:
    """Turned on by TraceSetting, a gateway started without tracing exports with its own
    (default) exporter flags; the service's url / exporter in the answer are not taken."""
    tracing = Tracing(TraceSettings(exporter="console"))
    tracing.follow("", {}, {"trace_level": ["TIMESTAMPS"], "url": ["http://elsewhere:1/x"]})
    try:
        assert tracing.active and tracing.started
        assert tracing.config.exporter == "console"
        assert tracing.settings() == ("TIMESTAMPS", 1000, -1)
    finally:
        tracing.shutdown()
