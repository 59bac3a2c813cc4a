"""The spans of one traced request: the request span, its queue / compute_input /
compute_infer / compute_output children, and one span per ensemble step.

The request span is made current while the core runs the request, so the ensemble's step
tasks (which copy the context) nest their spans under it. The timing children are drawn
from what the core returns, never from a hook into it: a response's ``timings`` (the
scheduler's ``ExecutionResult``) for ModelInfer and ensemble steps, the ``ExecutionRecord``
that ``stream_infer`` fills for ModelStreamInfer. The latter is how a decoupled model's
request gets its children too: its compute spans cover the model's ``execute`` call (as a
Triton backend reports them), and each response sent is a ``response`` event on the
request span, which ends after the final response and once ``execute`` has returned.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Iterable
from contextvars import Token
from types import TracebackType
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from ..errors import ServerError
from ..scheduling.base import ExecutionResult
from ..scheduling.ensemble import StepRunner
from ..types import (
    FINAL_FLAG,
    TRACE_CONTEXT,
    ExecutionRecord,
    InferRequest,
    InferResponse,
    TraceParent,
)
from .tracing import Tracing
from .triton_trace import TRITON_PARENT, TritonTrace

__all__ = ["RequestTrace", "TracingStepRunner", "begin_request", "bls_trace", "context_of"]

_PROPAGATOR = TraceContextTextMapPropagator()
_PARTS = ("compute_input", "compute_infer", "compute_output")


class RequestTrace:
    """A span for one request (or one ensemble step); a context manager around the call.

    The caller hands over what the core returned: ``executed`` with a response's timings,
    or ``record`` to ``stream_infer`` plus ``sent`` for each streamed response.
    """

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
        self.record = ExecutionRecord()
        self._sent = 0
        self._token: Token[otel_context.Context] | None = None
        self._context_token: Token[TraceParent | None] | None = None

    def __enter__(self) -> RequestTrace:
        self._token = otel_context.attach(trace.set_span_in_context(self.span))
        self._context_token = TRACE_CONTEXT.set(self)  # for BLS children
        return self

    def parent_text(self) -> str:
        return context_of(self.span)

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._token is not None and self._context_token is not None
        TRACE_CONTEXT.reset(self._context_token)
        otel_context.detach(self._token)
        if error is not None:
            message = error.message if isinstance(error, ServerError) else type(error).__name__
            self.span.set_status(Status(StatusCode.ERROR, message))
        self._children()
        self.span.end()

    def executed(self, result: ExecutionResult | None) -> None:
        """The timings a response carried (None: answered from the response cache)."""
        self.record.result = result

    def sent(self, response: InferResponse) -> None:
        """A streamed response went out: an event with its index and final flag."""
        final = response.parameters.get(FINAL_FLAG, True) is True  # non-decoupled: the one
        self.span.add_event(
            "response", {"triton.response_index": self._sent, "triton.final_response": final}
        )
        self._sent += 1

    def answered(self, response: InferResponse) -> None:
        """The unary response (Triton's mode reads it; spans need nothing from it)."""

    def fail(self, message: str) -> None:
        """An error reported in-band (streams) rather than raised."""
        self.span.set_status(Status(StatusCode.ERROR, message))

    def _children(self) -> None:
        result = self.record.result
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


def context_of(span: trace.Span) -> str:
    """A span's OpenTelemetry context as the JSON of its propagation fields: what a Python
    model's ``request.trace().get_context()`` returns, and its BLS requests' parent."""
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier, context=trace.set_span_in_context(span))
    return json.dumps(carrier)


def bls_trace(
    tracing: Tracing, request: InferRequest, context: str
) -> RequestTrace | TritonTrace | None:
    """The trace of a BLS request made with ``trace=request.trace()`` of a traced request:
    a span under that request's, or in Triton's mode a child trace naming its parent
    (None: tracing off, or no usable context)."""
    if context.startswith(TRITON_PARENT):
        parent_id = context.removeprefix(TRITON_PARENT)
        return tracing.begin_triton_child(request, int(parent_id)) if parent_id.isdigit() else None
    if tracing.tracer is None or not context:
        return None
    try:
        carrier = json.loads(context)
    except ValueError:
        return None
    if not isinstance(carrier, dict):
        return None
    parent = _PROPAGATOR.extract({str(k): str(v) for k, v in carrier.items()})
    attributes = _attributes("BLS", request.model_name, request.model_version, request.id)
    return RequestTrace(tracing.tracer, "bls", attributes, parent, kind=SpanKind.INTERNAL)


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
) -> RequestTrace | TritonTrace | None:
    """A trace for this request if it is sampled; the parent comes from ``traceparent``."""
    carrier = {k: v for k, v in metadata or () if k in ("traceparent", "tracestate")}
    parent = _PROPAGATOR.extract(carrier) if carrier else None
    remote = trace.get_current_span(parent).get_span_context() if parent else None
    sampled = bool(remote is not None and remote.is_valid and remote.trace_flags.sampled)
    if tracing.trace_log is not None:  # Triton's mode: no parent context is followed
        return tracing.begin_triton(request, False)
    if tracing.tracer is None or not tracing.sample(request.model_name, sampled):
        return None
    attributes = _attributes(rpc, request.model_name, request.model_version, request.id)
    return RequestTrace(tracing.tracer, rpc, attributes, parent)


class TracingStepRunner:
    """The ensemble's StepRunner: a child span per step when the ensemble request is traced.

    "Traced" is read from the OpenTelemetry context: a request span is current (recording)
    only inside a ``RequestTrace``, and the ensemble's step tasks inherit that context.
    """

    def __init__(self, runner: StepRunner, tracing: Tracing) -> None:
        self._runner = runner
        self._tracing = tracing

    async def stream_infer(
        self, request: InferRequest, record: ExecutionRecord | None = None
    ) -> AsyncIterator[InferResponse]:
        tracer = self._tracing.tracer
        if tracer is None or not trace.get_current_span().is_recording():
            async for response in self._runner.stream_infer(request, record):
                yield response
            return
        attributes = _attributes("ensemble_step", request.model_name, request.model_version, "")
        attributes["triton.request_id"] = request.id
        with RequestTrace(tracer, "ensemble_step", attributes, kind=SpanKind.INTERNAL) as step:
            async for response in self._runner.stream_infer(request, step.record):
                step.sent(response)
                yield response
