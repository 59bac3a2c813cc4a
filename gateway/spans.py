"""The span of one traced inference request, its translation children, and the trace
context the gateway hands to the service.

Imported only when tracing is on (``Tracing.start``). The request span is a SERVER span
named ``METHOD /route/{template}`` whose parent is the caller's ``traceparent``; the
service receives *this* span's context as gRPC metadata, so its request span nests under
the gateway's. ``translate_request`` / ``translate_response`` cover the JSON or binary
to protobuf translation and back (siblings of the service's span).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from .access import TRACE_HEADERS
from .routes import Binding

__all__ = ["RequestSpan", "SpanFactory"]

_PROPAGATOR = TraceContextTextMapPropagator()


class RequestSpan:
    """One request's SERVER span; ``metadata()`` gives what to send the service."""

    __slots__ = ("_context", "_ended", "_tracer", "carrier", "span")

    def __init__(self, tracer: trace.Tracer, span: trace.Span) -> None:
        self._tracer = tracer
        self.span = span
        self._context = trace.set_span_in_context(span)
        carrier: dict[str, str] = {}
        _PROPAGATOR.inject(carrier, context=self._context)
        #: ``traceparent`` (and ``tracestate``) naming this span as the parent.
        self.carrier = tuple(carrier.items())
        self._ended = False

    def metadata(self, forwarded: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
        """The request's gRPC metadata with the caller's trace headers replaced by ours."""
        return self.carrier + tuple(kv for kv in forwarded if kv[0] not in TRACE_HEADERS)

    def phase(self, name: str, start_ns: int) -> None:
        """A child span from ``start_ns`` (``time.time_ns()``) until now."""
        child = self._tracer.start_span(
            name, context=self._context, kind=SpanKind.INTERNAL, start_time=start_ns
        )
        child.end()

    def finish(self, status: int, message: str | None = None) -> None:
        """End the span with the HTTP status; a 4xx/5xx is an ERROR carrying ``message``."""
        if self._ended:
            return
        self._ended = True
        self.span.set_attribute("http.response.status_code", status)
        if status >= 400:
            self.span.set_status(Status(StatusCode.ERROR, message or f"HTTP {status}"))
        self.span.end()


class SpanFactory:
    """Reads the caller's trace context and opens request spans on one tracer."""

    def __init__(self, tracer: trace.Tracer) -> None:
        self._tracer = tracer

    @staticmethod
    def extract(headers: Mapping[str, str]) -> Context | None:
        """The caller's W3C trace context, or None when absent or malformed."""
        if "traceparent" not in headers:
            return None
        context = _PROPAGATOR.extract({k: headers[k] for k in TRACE_HEADERS if k in headers})
        return context if trace.get_current_span(context).get_span_context().is_valid else None

    @staticmethod
    def sampled(parent: Context) -> bool:
        return bool(trace.get_current_span(parent).get_span_context().trace_flags.sampled)

    def begin(
        self,
        method: str,
        raw_path: bytes,
        binding: Binding,
        params: Mapping[str, str],
        parent: Context | None,
    ) -> RequestSpan:
        attributes: dict[str, Any] = {
            "http.request.method": method,
            "http.route": binding.template,
            "url.path": raw_path.decode("latin-1"),
            "triton.model_name": params.get("model_name", ""),
            "triton.model_version": params.get("model_version", ""),
        }
        span = self._tracer.start_span(
            f"{method} {binding.template}",
            context=parent,
            kind=SpanKind.SERVER,
            attributes=attributes,
        )
        return RequestSpan(self._tracer, span)
