"""The gateway's own span, end to end: real service and real gateway, both exporting OTLP
over HTTP to an in-test collector, so the whole tree is checked as a backend would see it.

Proves: the gateway's SERVER span takes the caller's ``traceparent`` as its parent; the
service's request span is a child of the gateway's span (the gateway propagates its own
context, not the caller's); the translation children sit under the gateway span; a
failure (404 unknown model) is an ERROR span with the message; spans are flushed when
both processes stop on SIGTERM; REST TraceSetting calls through the gateway (global and
per model) turn the gateway's spans on and off along with the service's.
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from conftest import running_gateway
from gateway_process import GatewayProcess, http_request
from otlp_collector import KIND_INTERNAL, KIND_SERVER, STATUS_ERROR, OtlpCollector, Span
from server_process import ServerProcess

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"
MISSING_TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
STREAM_TRACE_ID = "5a1b2c3d4e5f60718293a4b5c6d7e8f9"
ADD_SUB = {
    "inputs": [
        {"name": "INPUT0", "shape": [1, 2], "datatype": "FP32", "data": [1, 2]},
        {"name": "INPUT1", "shape": [1, 2], "datatype": "FP32", "data": [3, 4]},
    ]
}
GATEWAY = "triton-compatible-gateway"
SERVICE = "triton-inference-server"  # Triton's service.name (src/tracer.cc)


def _traceparent(trace_id: str) -> dict[str, str]:
    return {"traceparent": f"00-{trace_id}-{PARENT_ID}-01", "tracestate": "vendor=abc"}


@dataclass
class Run:
    """What the collector received after the requests, once both processes stopped."""

    spans: list[Span]
    untraced_reply_status: int

    def of(self, service: str, trace_id: str) -> list[Span]:
        return [s for s in self.spans if s.service == service and s.trace_id == trace_id]

    def gateway_span(self, trace_id: str) -> Span:
        (span,) = [s for s in self.of(GATEWAY, trace_id) if s.kind == KIND_SERVER]
        return span


@pytest.fixture(scope="module")
def run() -> Iterator[Run]:
    with OtlpCollector() as collector:
        trace = ["--trace-config=level=TIMESTAMPS", "--trace-config=rate=1"]
        trace.append(f"--trace-config=opentelemetry,url={collector.url}")
        service = ServerProcess(extra_args=trace).start()
        try:
            with running_gateway(service.url, trace) as gw:
                ok = http_request(
                    gw.url, "POST", "/v2/models/add_sub/infer", ADD_SUB, _traceparent(TRACE_ID)
                )
                assert ok.status == 200, ok
                assert ok.json()["outputs"][0]["data"] == [4.0, 6.0]
                missing = http_request(
                    gw.url, "POST", "/v2/models/nope/infer", ADD_SUB, _traceparent(MISSING_TRACE_ID)
                )
                assert missing.status == 404, missing
                stream = http_request(
                    gw.url,
                    "POST",
                    "/v2/models/text_upper/generate_stream",
                    {"TEXT": ["ab", "c"]},
                    _traceparent(STREAM_TRACE_ID),
                )
                assert stream.status == 200, stream
                assert json.loads(stream.body.split(b"\n\n")[0][6:])["UPPER"] == ["AB", "C"]
                root = http_request(gw.url, "POST", "/v2/models/add_sub/infer", ADD_SUB)
                assert root.status == 200, root
                # Only inference routes are traced.
                assert http_request(gw.url, "GET", "/v2/health/ready").status == 200
            assert "tracing on: exporter otlp-http" in gw.log
        finally:
            code = service.stop()
        assert code == 0, service.log
        # Both processes flushed at exit: nothing is waited for here.
        yield Run(collector.received(), root.status)


def test_gateway_span_is_a_child_of_the_callers_traceparent(run: Run) -> None:
    span = run.gateway_span(TRACE_ID)
    assert span.parent_id == PARENT_ID
    assert span.name == "POST /v2/models/{model_name}/infer"
    assert span.attributes["http.request.method"] == "POST"
    assert span.attributes["http.route"] == "/v2/models/{model_name}/infer"
    assert span.attributes["url.path"] == "/v2/models/add_sub/infer"
    assert span.attributes["triton.model_name"] == "add_sub"
    assert span.attributes["http.response.status_code"] == 200
    assert span.status_code != STATUS_ERROR


def test_service_span_is_a_child_of_the_gateway_span(run: Run) -> None:
    gateway = run.gateway_span(TRACE_ID)
    (infer,) = [s for s in run.of(SERVICE, TRACE_ID) if s.name == "ModelInfer"]
    assert infer.parent_id == gateway.span_id  # not the caller's span: the gateway's
    assert infer.kind == KIND_SERVER
    assert gateway.start_ns <= infer.start_ns and infer.end_ns <= gateway.end_ns
    # The service's own children hang under its request span, in the same trace.
    parts = {s.name for s in run.of(SERVICE, TRACE_ID) if s.parent_id == infer.span_id}
    assert {"compute_input", "compute_infer", "compute_output"} <= parts


def test_translation_spans_sit_under_the_gateway_span(run: Run) -> None:
    gateway = run.gateway_span(TRACE_ID)
    children = {s.name: s for s in run.of(GATEWAY, TRACE_ID) if s.parent_id == gateway.span_id}
    assert set(children) == {"translate_request", "translate_response"}
    (infer,) = [s for s in run.of(SERVICE, TRACE_ID) if s.name == "ModelInfer"]
    request, response = children["translate_request"], children["translate_response"]
    assert all(s.kind == KIND_INTERNAL for s in (request, response))
    # JSON -> protobuf before the RPC, protobuf -> JSON after it.
    assert request.end_ns <= infer.start_ns and infer.end_ns <= response.start_ns


def test_unknown_model_is_an_error_span(run: Run) -> None:
    span = run.gateway_span(MISSING_TRACE_ID)
    assert span.parent_id == PARENT_ID
    assert span.status_code == STATUS_ERROR
    assert "nope" in span.status_message
    assert span.attributes["http.response.status_code"] == 404


def test_generate_stream_span_covers_the_stream(run: Run) -> None:
    span = run.gateway_span(STREAM_TRACE_ID)
    assert span.name == "POST /v2/models/{model_name}/generate_stream"
    assert span.attributes["http.response.status_code"] == 200
    (stream,) = [s for s in run.of(SERVICE, STREAM_TRACE_ID) if s.name == "ModelStreamInfer"]
    assert stream.parent_id == span.span_id
    assert stream.end_ns <= span.end_ns


def test_without_a_traceparent_the_gateway_span_is_the_root(run: Run) -> None:
    known = {TRACE_ID, MISSING_TRACE_ID, STREAM_TRACE_ID}
    roots = [s for s in run.spans if s.service == GATEWAY and s.trace_id not in known]
    (root,) = [s for s in roots if s.kind == KIND_SERVER]
    assert root.parent_id == ""
    (infer,) = [s for s in run.of(SERVICE, root.trace_id) if s.name == "ModelInfer"]
    assert infer.parent_id == root.span_id
    # Health checks made no span on either side.
    assert all(s.kind != KIND_SERVER or s.trace_id in known | {root.trace_id} for s in run.spans)


def test_unreachable_collector_delays_neither_requests_nor_exit() -> None:
    """Spans still queued at exit are flushed for at most the exit timeout's remainder."""
    args = ["--trace-config=level=TIMESTAMPS", "--trace-config=rate=1", "--exit-timeout-secs=2"]
    args.append("--trace-config=opentelemetry,url=127.0.0.1:9/v1/traces")
    gw = GatewayProcess("127.0.0.1:9", args).start()
    try:
        for _ in range(5):
            started = time.monotonic()
            reply = http_request(gw.url, "POST", "/v2/models/add_sub/infer", ADD_SUB, timeout=10)
            assert reply.status == 503, reply  # no service either: still traced, answered
            assert time.monotonic() - started < 5
        started = time.monotonic()
        gw.send_signal(signal.SIGTERM)
        assert gw.wait(30) == 0, gw.log
        assert time.monotonic() - started < 8, gw.log
        assert "trace exporter did not flush within" in gw.log
    finally:
        gw.kill()


def test_trace_setting_through_the_gateway_governs_both_processes() -> None:
    """Both start with tracing off (only the collector's URL given); every change is made
    with REST TraceSetting calls through the gateway, as in one-process Triton."""
    ids = {
        name: f"{index + 1:x}" * 32
        for index, name in enumerate(["on", "off", "model", "other", "cleared", "rejected"])
    }
    with OtlpCollector() as collector:
        url = [f"--trace-config=opentelemetry,url={collector.url}"]
        service = ServerProcess(extra_args=url).start()
        try:
            with running_gateway(service.url, url) as gw:

                def setting(path: str, settings: dict[str, object]) -> dict[str, object]:
                    reply = http_request(gw.url, "POST", path, settings)
                    assert reply.status == 200, reply
                    return dict(reply.json())

                def infer(name: str) -> None:
                    reply = http_request(
                        gw.url, "POST", "/v2/models/add_sub/infer", ADD_SUB, _traceparent(ids[name])
                    )
                    assert reply.status == 200, reply

                on = {"trace_level": ["TIMESTAMPS"], "trace_rate": "1"}
                assert setting("/v2/trace/setting", on)["trace_level"] == ["TIMESTAMPS"]
                infer("on")
                assert setting("/v2/trace/setting", {"trace_level": ["OFF"]})["trace_rate"] == "1"
                infer("off")
                model = "/v2/models/add_sub/trace/setting"
                assert setting(model, {"trace_level": ["TIMESTAMPS"]})["trace_level"] == [
                    "TIMESTAMPS"
                ]
                infer("model")
                other = http_request(
                    gw.url,
                    "POST",
                    "/v2/models/text_upper/generate_stream",
                    {"TEXT": ["ab"]},
                    _traceparent(ids["other"]),
                )
                assert other.status == 200, other
                assert setting(model, {"trace_level": None})["trace_level"] == ["OFF"]
                infer("cleared")
                # A value the service rejects changes neither process.
                bad = http_request(gw.url, "POST", "/v2/trace/setting", {**on, "trace_rate": "0"})
                assert bad.status == 400, bad
                infer("rejected")
            assert "tracing on: exporter otlp-http" in gw.log
            assert "trace settings from the service (model 'add_sub')" in gw.log
        finally:
            code = service.stop()
        assert code == 0, service.log
        spans = collector.received()  # both processes flushed at exit

    def names(service_name: str, name: str) -> set[str]:
        return {s.name for s in spans if s.service == service_name and s.trace_id == ids[name]}

    for name in ("on", "model"):  # traced by both, the service's span under the gateway's
        gateway = [s for s in spans if s.service == GATEWAY and s.trace_id == ids[name]]
        (server,) = [s for s in gateway if s.kind == KIND_SERVER]
        assert server.attributes["triton.model_name"] == "add_sub"
        assert {s.name for s in gateway} == {server.name, "translate_request", "translate_response"}
        (infer_span,) = [
            s
            for s in spans
            if s.service == SERVICE and s.trace_id == ids[name] and s.name == "ModelInfer"
        ]
        assert infer_span.parent_id == server.span_id
    for name in ("off", "other", "cleared", "rejected"):
        assert names(GATEWAY, name) == set() and names(SERVICE, name) == set(), name
