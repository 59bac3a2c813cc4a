"""The metrics text (names, labels, escaping, families) and the in-loop HTTP endpoint."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import pytest

from service.statistics import BatchTimings, ModelStats
from service.telemetry.metrics import CONTENT_TYPE, MetricsRenderer
from service.telemetry.metrics_http import MetricsEndpoint


@dataclass
class FakeScheduler:
    inflight: int = 0


@dataclass
class FakeModel:
    name: str
    version: int
    stats: ModelStats = field(default_factory=ModelStats)
    scheduler: FakeScheduler | None = field(default_factory=FakeScheduler)


def _samples(text: bytes) -> dict[str, str]:
    out = {}
    for line in text.decode().splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = value
    return out


def test_values_come_from_model_stats_at_render_time() -> None:
    model = FakeModel("m", 2)
    renderer = MetricsRenderer(lambda: [model])
    assert _samples(renderer.render())['nv_inference_request_success{model="m",version="2"}'] == "0"
    timings = BatchTimings(start=0, input_end=1_500, infer_end=11_500, end=12_000)
    model.stats.record_execution(4, timings)
    model.stats.record_success(20_999, 3_000, timings, 4)
    model.stats.record_failure(5_000, "BACKEND")
    model.stats.record_cancelled()
    model.scheduler = FakeScheduler(inflight=3)
    samples = _samples(renderer.render())
    labels = '{model="m",version="2"}'
    assert samples[f"nv_inference_request_success{labels}"] == "1"
    failure = 'nv_inference_request_failure{model="m",reason="%s",version="2"}'
    assert {r: samples[failure % r] for r in ("REJECTED", "CANCELED", "BACKEND", "OTHER")} == {
        "REJECTED": "0",
        "CANCELED": "1",  # a cancelled request is a failure, as in Triton
        "BACKEND": "1",
        "OTHER": "0",
    }
    assert model.stats.fail.count == 2
    assert samples[f"nv_inference_request_cancelled{labels}"] == "1"
    assert samples[f"nv_inference_count{labels}"] == "4"
    assert samples[f"nv_inference_exec_count{labels}"] == "1"
    assert samples[f"nv_inference_request_duration_us{labels}"] == "20"  # ns // 1000
    assert samples[f"nv_inference_queue_duration_us{labels}"] == "3"
    assert samples[f"nv_inference_compute_input_duration_us{labels}"] == "1"
    assert samples[f"nv_inference_compute_infer_duration_us{labels}"] == "10"
    assert samples[f"nv_inference_compute_output_duration_us{labels}"] == "0"
    assert samples[f"nv_inference_pending_request_count{labels}"] == "3"


def test_every_family_has_help_and_type_and_triton_names() -> None:
    text = MetricsRenderer(lambda: [FakeModel("m", 1)], cache_enabled=True).render().decode()
    types = dict(line.split()[2:4] for line in text.splitlines() if line.startswith("# TYPE "))
    assert types["nv_inference_pending_request_count"] == "gauge"
    assert types["nv_cache_num_hits_per_model"] == "counter"
    assert all(kind in ("counter", "gauge") for kind in types.values())
    assert not any(name.endswith("_total") for name in types)  # Triton's bare counter names
    helps = {line.split()[2] for line in text.splitlines() if line.startswith("# HELP ")}
    assert helps == set(types)


def test_cache_families_only_with_a_cache() -> None:
    text = MetricsRenderer(lambda: [FakeModel("m", 1)]).render().decode()
    assert "nv_cache_" not in text


def test_model_without_scheduler_and_no_models() -> None:
    text = MetricsRenderer(lambda: [FakeModel("m", 1, scheduler=None)]).render()
    assert _samples(text)['nv_inference_pending_request_count{model="m",version="1"}'] == "0"
    empty = MetricsRenderer(list).render().decode()
    assert "# TYPE nv_inference_count counter" in empty
    assert "{" not in empty


def test_label_values_are_escaped() -> None:
    text = MetricsRenderer(lambda: [FakeModel('we"ird\\na\nme', 1)]).render().decode()
    assert 'model="we\\"ird\\\\na\\nme"' in text
    assert all(line.count("\n") == 0 for line in text.splitlines())


async def _request(port: int, raw: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(raw)
    await writer.drain()
    reply = await reader.read()
    writer.close()
    await writer.wait_closed()
    return reply


@pytest.fixture
async def endpoint() -> object:
    server = MetricsEndpoint(lambda: b"metric 1\n", CONTENT_TYPE)
    port = await server.start("127.0.0.1", 0)
    yield port
    await server.stop()


async def test_endpoint_serves_metrics(endpoint: int) -> None:
    reply = await _request(endpoint, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    head, body = reply.split(b"\r\n\r\n", 1)
    assert head.startswith(b"HTTP/1.1 200 OK")
    assert f"Content-Type: {CONTENT_TYPE}".encode() in head
    assert b"Content-Length: 9" in head
    assert body == b"metric 1\n"


@pytest.mark.parametrize(
    ("raw", "status"),
    [
        (b"HEAD /metrics HTTP/1.1\r\n\r\n", b"200"),
        (b"GET /other HTTP/1.1\r\n\r\n", b"404"),
        (b"DELETE /metrics HTTP/1.1\r\n\r\n", b"405"),
        (b"GET /metrics\r\n\r\n", b"400"),
        (b"GET /metrics HTTP/1.1\r\n" + b"X: y\r\n" * 200 + b"\r\n", b"400"),
    ],
    ids=["head", "not-found", "method", "malformed", "too-many-headers"],
)
async def test_endpoint_refusals(endpoint: int, raw: bytes, status: bytes) -> None:
    reply = await _request(endpoint, raw)
    assert reply.split(b" ")[1] == status, reply
    if raw.startswith(b"HEAD"):
        assert reply.endswith(b"\r\n\r\n")  # headers only


async def test_oversized_request_line_closes_the_connection(endpoint: int) -> None:
    assert await _request(endpoint, b"GET /" + b"x" * 70_000 + b" HTTP/1.1\r\n\r\n") == b""


async def test_a_failing_renderer_does_not_stop_the_endpoint() -> None:
    calls = []

    def render() -> bytes:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("boom")
        return b"ok\n"

    server = MetricsEndpoint(render, CONTENT_TYPE)
    port = await server.start("127.0.0.1", 0)
    try:
        assert await _request(port, b"GET /metrics HTTP/1.1\r\n\r\n") == b""
        assert (await _request(port, b"GET /metrics HTTP/1.1\r\n\r\n")).endswith(b"ok\n")
    finally:
        await server.stop()


async def test_stop_drops_a_client_that_never_sends() -> None:
    server = MetricsEndpoint(lambda: b"", CONTENT_TYPE)
    port = await server.start("127.0.0.1", 0)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    await asyncio.sleep(0.05)  # accepted, waiting for a request line
    await asyncio.wait_for(server.stop(), 2)
    assert await asyncio.wait_for(reader.read(), 2) == b""
    writer.close()
    await writer.wait_closed()
