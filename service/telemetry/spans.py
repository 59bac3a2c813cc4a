"""The spans of one traced request: the request span, its queue / compute_input /
compute_infer / compute_output children, and one span per ensemble step.

The request span is made current while the core runs the request, so the ensemble's step
tasks (which copy the context) nest their spans under it. Execution timings come back
from the scheduler's result: ``TracedInferenceServer`` hands each request's
``ExecutionResult`` to the trace waiting in a ContextVar (one lookup per request).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from contextvars import ContextVar
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from ..core.model import ModelVersion
from ..core.server import InferenceServer
from ..errors import ServerError
from ..scheduling.base import ExecutionResult, Job
from ..scheduling.ensemble import StepRunner
from ..types import InferRequest, InferResponse
from .tracing import Tracing

__all__ = ["RequestTrace", "TracedInferenceServer", "TracingStepRunner", "begin_request"]

_PROPAGATOR = TraceContextTextMapPropagator()
_PARTS = ("compute_input", "compute_infer", "compute_output")


@dataclass
class _Collector:
    result: ExecutionResult | None = None


_CURRENT: ContextVar[_Collector | None] = ContextVar("service_request_trace", default=None)


class TracedInferenceServer(InferenceServer):
    """The core, handing each execution's timings to the trace of the request, if any."""

    @staticmethod
    async def _submit(model: ModelVersion, job: Job) -> ExecutionResult:
        result = await InferenceServer._submit(model, job)
        collector = _CURRENT.get()
        if collector is not None:
            collector.result = result
        return result


class RequestTrace:
    """A span for one request (or one ensemble step); a context manager around the call."""

    def __init__(
        self,
        tracer: trace.Tracer,
        name: str,
        attributes: dict[str, Any],
        parent: otel_context.Context | None = None,
        kind: SpanKind = SpanKind.SERVER,
    ) -> None:
        self._tracer = tracer
        self._offset = time.time_ns() - time.monotonic_ns()  # monotonic timings -> epoch
        self.span = tracer.start_span(name, context=parent, kind=kind, attributes=attributes)
        self._collector = _Collector()
        self._tokens: tuple[Any, Any] | None = None

    def __enter__(self) -> RequestTrace:
        self._tokens = (
            _CURRENT.set(self._collector),
            otel_context.attach(trace.set_span_in_context(self.span)),
        )
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._tokens is not None
        otel_context.detach(self._tokens[1])
        _CURRENT.reset(self._tokens[0])
        if error is not None:
            message = error.message if isinstance(error, ServerError) else type(error).__name__
            self.span.set_status(Status(StatusCode.ERROR, message))
        self._children()
        self.span.end()

    def fail(self, message: str) -> None:
        """An error reported in-band (streams) rather than raised."""
        self.span.set_status(Status(StatusCode.ERROR, message))

    def _children(self) -> None:
        result = self._collector.result
        if result is None:  # failed before execution, or answered from the response cache
            return
        t = result.timings
        bounds = [(t.start - result.queue_ns, t.start), (t.start, t.input_end)]
        bounds += [(t.input_end, t.infer_end), (t.infer_end, t.end)]
        parent = trace.set_span_in_context(self.span)
        for name, (start, end) in zip(("queue", *_PARTS), bounds, strict=True):
            child = self._tracer.start_span(
                name, context=parent, kind=SpanKind.INTERNAL, start_time=start + self._offset
            )
            child.end(end_time=end + self._offset)


def _attributes(rpc: str, model: str, version: str, request_id: str) -> dict[str, Any]:
    return {
        "rpc.system": "grpc",
        "rpc.service": "inference.GRPCInferenceService",
        "rpc.method": rpc,
        "triton.model_name": model,
        "triton.model_version": version,
        "triton.request_id": request_id,
    }


def begin_request(
    tracing: Tracing, rpc: str, request: Any, metadata: Iterable[tuple[str, Any]] | None
) -> RequestTrace | None:
    """A trace for this request if it is sampled; the parent comes from ``traceparent``."""
    carrier = {k: v for k, v in metadata or () if k in ("traceparent", "tracestate")}
    parent = _PROPAGATOR.extract(carrier) if carrier else None
    remote = trace.get_current_span(parent).get_span_context() if parent else None
    sampled = bool(remote is not None and remote.is_valid and remote.trace_flags.sampled)
    if tracing.tracer is None or not tracing.sample(request.model_name, sampled):
        return None
    attributes = _attributes(rpc, request.model_name, request.model_version, request.id)
    return RequestTrace(tracing.tracer, rpc, attributes, parent)


class TracingStepRunner:
    """The ensemble's StepRunner: a child span per step when the ensemble request is traced."""

    def __init__(self, runner: StepRunner, tracing: Tracing) -> None:
        self._runner = runner
        self._tracing = tracing

    async def infer(self, request: InferRequest) -> InferResponse:
        tracer = self._tracing.tracer
        if tracer is None or _CURRENT.get() is None:
            return await self._runner.infer(request)
        attributes = _attributes("ensemble_step", request.model_name, request.model_version, "")
        attributes["triton.request_id"] = request.id
        with RequestTrace(tracer, "ensemble_step", attributes, kind=SpanKind.INTERNAL):
            return await self._runner.infer(request)
