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
from service.core.inference_server import InferenceServer
from service.core.lifecycle import ControlMode, ModelManager
from service.grpc_frontend.aio_server import GrpcFrontend
from service.grpc_frontend.inprocess import LocalCore, LocalTracing
from service.telemetry.settings import TraceSettings
from service.telemetry.spans import TracingStepRunner
from service.telemetry.tracing import Tracing, make_exporter

IO = (
    [("INPUT0", "FP32", [-1]), ("INPUT1", "FP32", [-1])],
    [("OUTPUT0", "FP32", [-1]), ("OUTPUT1", "FP32", [-1])],
)
PARTS = ["queue", "compute_input", "compute_infer", "compute_output"]
# A decoupled model (built-in backend, in process): one response per IN value, each after
# its DELAY ms, sent from the model's own thread; execute returns after WAIT ms.
REPEAT = """
name: "repeat" backend: "repeat" max_batch_size: 0
model_transaction_policy { decoupled: true }
input [{ name: "IN" data_type: TYPE_INT32 dims: [-1] },
       { name: "DELAY" data_type: TYPE_UINT32 dims: [-1] },
       { name: "WAIT" data_type: TYPE_UINT32 dims: [1] }]
output [{ name: "OUT" data_type: TYPE_INT32 dims: [1] },
        { name: "IDX" data_type: TYPE_UINT32 dims: [1] }]
instance_group [{ count: 1 kind: KIND_CPU }]
"""
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
    (path / "repeat" / "1").mkdir(parents=True)
    (path / "repeat" / "config.pbtxt").write_text(REPEAT)
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
    core = InferenceServer(manager)
    manager.attach_runner(TracingStepRunner(core, tracing))
    await manager.start()
    config = ServerConfig(model_repositories=(repo,), grpc_address="127.0.0.1", grpc_port=0)
    frontend = GrpcFrontend(LocalCore(core), config, tracing=LocalTracing(tracing))
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


def _assert_timing_children(spans: list[ReadableSpan], parent: ReadableSpan) -> None:
    """queue, compute_input, compute_infer, compute_output: once each, one after the other
    (an ensemble's queue and compute_input are empty), all inside ``parent``."""
    children = [c for c in _children(spans, parent) if c.name in PARTS]
    children.sort(key=lambda c: PARTS.index(c.name))
    assert [c.name for c in children] == PARTS
    for child in children:
        assert child.context.trace_id == parent.context.trace_id
        assert parent.start_time <= child.start_time <= child.end_time <= parent.end_time  # type: ignore[operator]
    for before, after in itertools.pairwise(children):
        assert before.end_time <= after.start_time  # type: ignore[operator]


def _repeat_request(
    request_id: str, values: list[int], delays: list[int], wait_ms: int, empty_final: bool = False
) -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name="repeat", id=request_id)
    tensors = [
        ("IN", "INT32", np.array(values, np.int32)),
        ("DELAY", "UINT32", np.array(delays, np.uint32)),
        ("WAIT", "UINT32", np.array([wait_ms], np.uint32)),
    ]
    for name, datatype, array in tensors:
        request.inputs.add(name=name, datatype=datatype, shape=list(array.shape))
        request.raw_input_contents.append(array.tobytes())
    if empty_final:
        request.parameters["triton_enable_empty_final_response"].bool_param = True
    return request


def _roots(spans: list[ReadableSpan]) -> dict[str, ReadableSpan]:
    return {dict(s.attributes or {})["triton.request_id"]: s for s in spans if s.parent is None}  # type: ignore[misc]


def _response_events(span: ReadableSpan) -> list[tuple[int, bool]]:
    return [
        (
            int(e.attributes["triton.response_index"]),  # type: ignore[index, arg-type]
            bool(e.attributes["triton.final_response"]),  # type: ignore[index]
        )
        for e in span.events
        if e.name == "response"
    ]


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
    assert len(spans) == 5  # the request span and its four timing children, nothing else
    assert [c.name for c in _children(spans, root)] == PARTS
    _assert_timing_children(spans, root)
    assert root.events == ()  # response events belong to streams
    # Triton's resource name (tracer.cc), which Triton dashboards filter on
    assert root.resource.attributes["service.name"] == "triton-inference-server"


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
    assert len([s for s in rig.spans() if s.name == "ModelInfer"]) == 2  # requests 3 and 6
    assert (await rig.settings())["trace_count"] == ["0"]


@pytest.mark.parametrize(("rate", "sampled"), [(1, 20), (6, 3), (9, 2)])
def test_rate_takes_every_rate_th_request(rate: int, sampled: int) -> None:
    """Triton samples the rate-th request, the 2*rate-th, ... (``++sample_ % rate_``), not
    the first: L0_cmdline_trace's 20 requests at rate 6 make 3 traces, at 9, 2."""
    tracing = Tracing(TraceSettings(level="TIMESTAMPS", rate=rate))
    taken = [n for n in range(1, 21) if tracing.sample("simple", False)]
    assert len(taken) == sampled
    assert taken == list(range(rate, 21, rate))


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
    _assert_timing_children(spans, root)
    for step in steps:
        assert (step.attributes or {})["triton.model_name"] == "plain"
        assert [c.name for c in _children(spans, step)] == PARTS
        _assert_timing_children(spans, step)
        assert step.context.trace_id == root.context.trace_id
        assert root.start_time <= step.start_time <= step.end_time <= root.end_time  # type: ignore[operator]
    first, second = sorted(steps, key=lambda s: s.start_time or 0)
    assert first.end_time <= second.start_time  # type: ignore[operator]  # the second needs the first
    assert len(spans) == 1 + 4 + 2 * 5


async def test_untraced_ensemble_steps_make_no_spans(rig: Rig) -> None:
    """The step runner reads "traced" from the context: none while no request span is current."""
    await rig.settings("plain", trace_level=["TIMESTAMPS"], trace_rate=["1"])
    await rig.infer("pipe")  # the ensemble itself is not traced: its steps make no spans
    assert rig.spans() == []
    await rig.infer("plain")
    assert [s.name for s in rig.spans() if s.parent is None] == ["ModelInfer"]


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
    ("wait_ms", "empty_final"),
    [
        (0, False),  # execute returns at once; the responses follow from the model's thread
        (150, True),  # every response, the final one too, is sent before execute returns
    ],
)
async def test_decoupled_stream_has_timing_children_and_response_events(
    rig: Rig, wait_ms: int, empty_final: bool
) -> None:
    await rig.settings(trace_level=["TIMESTAMPS"], trace_rate=["1"])
    requests = [
        _repeat_request("three", [7, 8, 9], [20, 20, 20], wait_ms, empty_final),
        _repeat_request("one", [5], [10], wait_ms, empty_final),
    ]
    replies = [r async for r in rig.stub.ModelStreamInfer(iter(requests), timeout=10)]
    assert not any(r.error_message for r in replies)
    sent = {rid: [r for r in replies if r.infer_response.id == rid] for rid in ("three", "one")}
    extra = 1 if empty_final else 0  # the final flag alone goes out only when asked for
    assert [len(sent["three"]), len(sent["one"])] == [3 + extra, 1 + extra]

    spans = rig.spans()
    roots = _roots(spans)
    assert set(roots) == {"three", "one"}
    assert len(spans) == 2 * 5  # per request: the request span and its four children
    for rid, count in (("three", 3), ("one", 1)):
        root = roots[rid]
        assert root.name == "ModelStreamInfer" and root.status.is_ok
        assert (root.attributes or {})["triton.model_name"] == "repeat"
        _assert_timing_children(spans, root)
        expected = [(i, False) for i in range(count)] + [(count, True)] * empty_final
        assert _response_events(root) == expected
        for event in root.events:  # every response was sent while the request span was open
            assert root.start_time <= event.timestamp <= root.end_time  # type: ignore[operator]
        infer = next(c for c in _children(spans, root) if c.name == "compute_infer")
        duration = infer.end_time - infer.start_time  # type: ignore[operator]
        assert duration >= wait_ms * 1_000_000 * 0.9  # the model's execute, WAIT included
        if wait_ms:  # every response came from inside execute, and the span outlived it
            assert all(infer.start_time <= e.timestamp <= infer.end_time for e in root.events)  # type: ignore[operator]


async def test_decoupled_in_band_error_sets_error_status(rig: Rig) -> None:
    await rig.settings(trace_level=["TIMESTAMPS"], trace_rate=["1"])
    good = _repeat_request("good", [1, 2], [1, 1], 0)
    bad = _repeat_request("bad", [1, 2], [1], 0)  # the model answers with an error response
    replies = [r async for r in rig.stub.ModelStreamInfer(iter([good, bad]), timeout=10)]
    errors = [r.error_message for r in replies if r.error_message]
    assert len(errors) == 1 and "expected IN and DELAY shape to match" in errors[0]
    roots = _roots(rig.spans())
    assert roots["good"].status.is_ok and len(_response_events(roots["good"])) == 2
    assert roots["bad"].status.status_code.name == "ERROR"
    assert "expected IN and DELAY shape to match" in (roots["bad"].status.description or "")
    assert _response_events(roots["bad"]) == []  # the error is the status, not a response


async def test_untraced_decoupled_stream_is_unchanged(rig: Rig) -> None:
    """Tracing on but this request not sampled: same responses, no spans."""
    await rig.settings(trace_level=["TIMESTAMPS"], trace_rate=["1000"])
    await rig.infer()  # the first request of the scope is sampled: use it up
    rig.exporter.clear()
    request = _repeat_request("quiet", [3, 4], [1, 1], 0, empty_final=True)
    replies = [r async for r in rig.stub.ModelStreamInfer(iter([request]), timeout=10)]
    finals = [r.infer_response.parameters["triton_final_response"].bool_param for r in replies]
    assert finals == [False, False, True]
    assert rig.spans() == []


def test_response_timings_never_reach_the_wire() -> None:
    """The core's timings ride on the response object only: the encoding ignores them."""
    from service.grpc_frontend.codec import encode_infer_response
    from service.scheduling.base import ExecutionResult
    from service.statistics import BatchTimings
    from service.types import InferResponse, OutputTensor

    output = OutputTensor("OUT", "FP32", np.arange(4, dtype=np.float32))
    plain = InferResponse("m", "1", "id", [output], {"p": 1})
    timed = InferResponse("m", "1", "id", [output], {"p": 1})
    timed.timings = ExecutionResult({}, 5, BatchTimings(1, 2, 3, 4))
    assert plain == timed and "timings" not in repr(timed)
    encoded = encode_infer_response(timed, 1 << 20).SerializeToString(deterministic=True)
    assert encoded == encode_infer_response(plain, 1 << 20).SerializeToString(deterministic=True)


@pytest.mark.parametrize(
    ("model", "changes", "code", "message"),
    [
        ("", {"trace_file": ["x"]}, "UNIMPLEMENTED", "can not be updated through network"),
        ("nope", {}, "INVALID_ARGUMENT", "Request for unknown model : nope"),
        ("", {"trace_level": ["OFF", "TIMESTAMPS"]}, "INVALID_ARGUMENT", "only one trace level"),
        ("", {"trace_level": ["LOUD"]}, "INVALID_ARGUMENT", "unknown trace level 'LOUD'"),
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
