"""Tracing end to end in one process: the real gRPC frontend and core, spans captured by
the SDK's in-memory exporter; TraceSetting read and changed at run time."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import models
import numpy as np
import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from inference import grpc_service_pb2 as pb
from inference import grpc_service_pb2_grpc as pb_grpc
from service.config import ServerConfig
from service.core.lifecycle import ControlMode, ModelManager
from service.handlers.server import GrpcFrontend
from service.telemetry.settings import TraceSettings
from service.telemetry.spans import TracedInferenceServer, TracingStepRunner
from service.telemetry.tracing import Tracing, make_exporter

IO = (
    [("INPUT0", "FP32", [-1]), ("INPUT1", "FP32", [-1])],
    [("OUTPUT0", "FP32", [-1]), ("OUTPUT1", "FP32", [-1])],
)
PARTS = ["queue", "compute_input", "compute_infer", "compute_output"]
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"


def _repository(path: Path) -> Path:
    config = models.make_config("plain", *IO, max_batch_size=8)
    models.write_model(path, "plain", models.add_sub_model(), config)
    steps = ",\n".join(
        f'    {{ model_name: "plain" model_version: -1 input_map {{ key: "INPUT0" value: "{a}" }}'
        f' input_map {{ key: "INPUT1" value: "{b}" }} output_map {{ key: "OUTPUT0" value: "{c}" }}'
        f' output_map {{ key: "OUTPUT1" value: "{d}" }} }}'
        for a, b, c, d in [("A", "B", "SUM", "DIFF"), ("SUM", "DIFF", "OUT0", "OUT1")]
    )
    ensemble = models.make_config(
        "pipe",
        [("A", "FP32", [-1]), ("B", "FP32", [-1])],
        [("OUT0", "FP32", [-1]), ("OUT1", "FP32", [-1])],
        max_batch_size=8,
        platform="ensemble",
        instance_kind=None,
        extra=f"ensemble_scheduling {{\n step [\n{steps}\n ]\n}}\n",
    )
    (path / "pipe" / "1").mkdir(parents=True)
    (path / "pipe" / "config.pbtxt").write_text(ensemble)
    return path


@dataclass
class Rig:
    stub: pb_grpc.GRPCInferenceServiceStub
    tracing: Tracing
    exporter: InMemorySpanExporter

    def spans(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())

    async def infer(self, model: str = "plain", request_id: str = "r", **kw: Any) -> Any:
        a = np.ones((1, 2), dtype=np.float32)
        names = ("A", "B") if model == "pipe" else ("INPUT0", "INPUT1")
        request = pb.ModelInferRequest(model_name=model, id=request_id)
        for name in names:
            request.inputs.add(name=name, datatype="FP32", shape=[1, 2])
            request.raw_input_contents.append(a.tobytes())
        return await self.stub.ModelInfer(request, timeout=10, **kw)

    async def settings(self, model: str = "", **changes: list[str]) -> dict[str, list[str]]:
        request = pb.TraceSettingRequest(model_name=model)
        for name, values in changes.items():
            request.settings[name].value.extend(values)
        reply = await self.stub.TraceSetting(request, timeout=10)
        return {k: list(v.value) for k, v in reply.settings.items()}


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[Rig]:
    repo = _repository(tmp_path)
    exporter = InMemorySpanExporter()
    tracing = Tracing(TraceSettings(), processor=SimpleSpanProcessor(exporter))
    manager = ModelManager([repo], mode=ControlMode.NONE)
    core = TracedInferenceServer(manager)
    manager.attach_runner(TracingStepRunner(core, tracing))
    await manager.start()
    config = ServerConfig(model_repositories=(repo,), grpc_address="127.0.0.1", grpc_port=0)
    frontend = GrpcFrontend(core, config, tracing=tracing)
    port = await frontend.start()
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        yield Rig(pb_grpc.GRPCInferenceServiceStub(channel), tracing, exporter)
    await frontend.stop(0)
    await manager.unload_all()
    tracing.shutdown()


def _children(spans: list[ReadableSpan], parent: ReadableSpan) -> list[ReadableSpan]:
    return sorted(
        (s for s in spans if s.parent is not None and s.parent.span_id == parent.context.span_id),
        key=lambda s: (s.start_time or 0, s.name),
    )


async def test_off_by_default_builds_nothing(rig: Rig) -> None:
    await rig.infer()
    assert rig.spans() == []
    assert rig.tracing.tracer is None and not rig.tracing.active
    meta = await rig.stub.ServerMetadata(pb.ServerMetadataRequest(), timeout=10)
    assert {"trace", "logging"} & set(meta.extensions) == {"trace"}  # no LogControl here
    assert (await rig.settings())["trace_level"] == ["OFF"]


async def test_request_span_with_timing_children(rig: Rig) -> None:
    reply = await rig.settings(trace_level=["TIMESTAMPS"], trace_rate=["1"])
    assert reply["trace_level"] == ["TIMESTAMPS"] and reply["trace_rate"] == ["1"]
    assert reply["trace_mode"] == ["opentelemetry"]
    await rig.infer(request_id="req-1")
    spans = rig.spans()
    (root,) = [s for s in spans if s.parent is None]
    assert root.name == "ModelInfer"
    attributes = dict(root.attributes or {})
    assert attributes["triton.model_name"] == "plain"
    assert attributes["triton.request_id"] == "req-1"
    children = _children(spans, root)
    assert [c.name for c in children] == PARTS
    for child in children:
        assert root.start_time <= child.start_time <= child.end_time <= root.end_time  # type: ignore[operator]
    for before, after in itertools.pairwise(children):
        assert before.end_time <= after.start_time  # type: ignore[operator]


async def test_traceparent_from_metadata_is_the_parent(rig: Rig) -> None:
    await rig.settings(trace_level=["TIMESTAMPS"], trace_rate=["1000"])
    await rig.infer()  # the first request of a scope is always sampled: use it up
    rig.exporter.clear()
    metadata = (("traceparent", f"00-{TRACE_ID}-{PARENT_ID}-01"),)
    await rig.infer(metadata=metadata)  # sampled by the caller, whatever the rate
    (root,) = [s for s in rig.spans() if s.name == "ModelInfer"]
    assert f"{root.context.trace_id:032x}" == TRACE_ID
    assert root.parent is not None and f"{root.parent.span_id:016x}" == PARENT_ID
    await rig.infer(metadata=(("traceparent", f"00-{TRACE_ID}-{PARENT_ID}-00"),))
    assert len([s for s in rig.spans() if s.name == "ModelInfer"]) == 1  # rate applies


async def test_rate_and_count(rig: Rig) -> None:
    await rig.settings(trace_level=["TIMESTAMPS"], trace_rate=["3"], trace_count=["2"])
    for _ in range(9):
        await rig.infer()
    assert len([s for s in rig.spans() if s.name == "ModelInfer"]) == 2  # requests 1 and 4
    assert (await rig.settings())["trace_count"] == ["0"]


async def test_per_model_settings_and_clear(rig: Rig) -> None:
    reply = await rig.settings("plain", trace_level=["TIMESTAMPS"], trace_rate=["1"])
    assert reply["trace_level"] == ["TIMESTAMPS"]
    assert (await rig.settings())["trace_level"] == ["OFF"]  # global unchanged
    assert rig.tracing.active
    await rig.infer("plain")
    assert len(rig.spans()) == 5
    cleared = await rig.settings("plain", trace_level=[])
    assert cleared["trace_level"] == ["OFF"]  # inherits the global level again
    assert not rig.tracing.active
    await rig.infer("plain")
    assert len(rig.spans()) == 5


async def test_ensemble_steps_are_child_spans(rig: Rig) -> None:
    await rig.settings(trace_level=["TIMESTAMPS"], trace_rate=["1"])
    await rig.infer("pipe", request_id="ens")
    spans = rig.spans()
    (root,) = [s for s in spans if s.parent is None]
    assert (root.attributes or {})["triton.model_name"] == "pipe"
    children = _children(spans, root)
    steps = [c for c in children if c.name == "ensemble_step"]
    assert len(steps) == 2
    assert sorted(c.name for c in children if c.name != "ensemble_step") == sorted(PARTS)
    for step in steps:
        assert (step.attributes or {})["triton.model_name"] == "plain"
        assert [c.name for c in _children(spans, step)] == PARTS
        assert step.context.trace_id == root.context.trace_id


async def test_failed_request_span_has_error_status(rig: Rig) -> None:
    await rig.settings(trace_level=["TIMESTAMPS"], trace_rate=["1"])
    request = pb.ModelInferRequest(model_name="plain", id="bad")
    request.inputs.add(name="INPUT0", datatype="INT32", shape=[1]).contents.int_contents.append(1)
    with pytest.raises(grpc.aio.AioRpcError):
        await rig.stub.ModelInfer(request, timeout=10)
    (root,) = rig.spans()
    assert root.status.status_code.name == "ERROR"
    assert "missing required input(s)" in (root.status.description or "")


async def test_stream_requests_are_traced(rig: Rig) -> None:
    await rig.settings(trace_level=["TIMESTAMPS"], trace_rate=["1"])
    good = pb.ModelInferRequest(model_name="plain", id="s1")
    for name in ("INPUT0", "INPUT1"):
        good.inputs.add(name=name, datatype="FP32", shape=[1, 1])
        good.raw_input_contents.append(np.ones(1, np.float32).tobytes())
    bad = pb.ModelInferRequest(model_name="plain", id="s2")
    replies = [r async for r in rig.stub.ModelStreamInfer(iter([good, bad]), timeout=10)]
    assert len(replies) == 2
    roots = {
        dict(s.attributes or {})["triton.request_id"]: s for s in rig.spans() if s.parent is None
    }
    assert roots["s1"].name == "ModelStreamInfer" and roots["s1"].status.is_ok
    assert roots["s2"].status.status_code.name == "ERROR"


@pytest.mark.parametrize(
    ("model", "changes", "code", "message"),
    [
        ("", {"trace_file": ["x"]}, "UNIMPLEMENTED", "can not be updated through network"),
        ("nope", {}, "INVALID_ARGUMENT", "Request for unknown model : nope"),
        ("", {"trace_level": ["OFF", "TIMESTAMPS"]}, "INVALID_ARGUMENT", "only one trace level"),
        ("", {"trace_level": ["TENSORS"]}, "INVALID_ARGUMENT", "tensors are never traced"),
        ("", {"trace_level": ["LOUD"]}, "INVALID_ARGUMENT", "unknown trace level 'LOUD'"),
        ("", {"trace_rate": ["x"]}, "INVALID_ARGUMENT", "Unable to parse 'trace_rate', got: x"),
        ("", {"trace_rate": ["1", "2"]}, "INVALID_ARGUMENT", "expect only 1 value"),
        ("", {"trace_rate": ["0"]}, "INVALID_ARGUMENT", "Expecting value >= 1, got: 0"),
        ("", {"trace_count": ["-2"]}, "INVALID_ARGUMENT", "Expecting value >= -1, got: -2"),
    ],
)
async def test_trace_setting_errors(
    rig: Rig, model: str, changes: dict[str, list[str]], code: str, message: str
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await rig.settings(model, **changes)
    assert info.value.code().name == code
    assert message in (info.value.details() or "")
    assert (await rig.settings())["trace_level"] == ["OFF"]  # nothing applied


def test_exporters_named_by_the_settings() -> None:
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as Grpc
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as Http

    assert isinstance(make_exporter(TraceSettings(exporter="console")), ConsoleSpanExporter)
    assert isinstance(make_exporter(TraceSettings(exporter="otlp-http")), Http)
    grpc_exporter = make_exporter(TraceSettings(exporter="otlp-grpc", url="http://127.0.0.1:1"))
    assert isinstance(grpc_exporter, Grpc)
    grpc_exporter.shutdown()
