"""The gateway's own OpenTelemetry spans: sampling, and the tracer provider with its exporter.

``active`` is a plain attribute the app reads before anything else: with tracing off an
inference request pays that one check and its trace headers are forwarded unchanged.
Nothing here imports OpenTelemetry at module level; the SDK, the exporter and
``gateway/spans.py`` are imported by ``start()``, only when tracing is on.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from importlib import metadata
from typing import TYPE_CHECKING

from .config import TraceConfig

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter

    from .routes import Binding
    from .spans import RequestSpan, SpanFactory

__all__ = ["GATEWAY_NAME", "TRACED_RPCS", "Tracing", "make_exporter"]

log = logging.getLogger(__name__)

#: ``service.name`` of the gateway's spans (the service's own spans say
#: ``triton-compatible-server``).
GATEWAY_NAME = "triton-compatible-gateway"

#: The RPCs behind the inference routes (infer, generate, generate_stream): only their
#: requests get a span, as only inferences get one in the service.
TRACED_RPCS = frozenset({"ModelInfer", "ModelStreamInfer"})


def make_exporter(config: TraceConfig) -> SpanExporter:
    """The exporter ``--trace-config opentelemetry,exporter=...`` names (imported lazily)."""
    if config.exporter == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter()
    if config.exporter == "otlp-grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
            OTLPSpanExporter as GrpcExporter,
        )

        return GrpcExporter(endpoint=config.url)
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter(endpoint=config.url)


class Tracing:
    """Whether, and under which parent, a request gets a gateway span.

    Sampling follows the service's rule: a caller's sampled ``traceparent`` is always
    followed; otherwise 1 request in ``rate``, while ``count`` (unless -1) lasts.
    """

    def __init__(self, config: TraceConfig, processor: SpanProcessor | None = None) -> None:
        self.config = config
        self.active = config.on
        self._processor = processor  # tests inject one; otherwise built from the config
        self._provider: TracerProvider | None = None
        self._spans: SpanFactory | None = None
        self._seen = 0
        self._left = config.count

    def start(self) -> None:
        """Build the provider and exporter (once; nothing while tracing is off)."""
        if not self.active or self._provider is not None:
            return
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.sdk.trace.sampling import ALWAYS_ON

        from .spans import SpanFactory

        attributes = {"service.name": GATEWAY_NAME, "service.version": _version()}
        attributes.update(dict(self.config.resource))
        # Sampling is decided in sample(), so the SDK records every span it is asked for,
        # even under a caller's unsampled traceparent (as the service does).
        provider = TracerProvider(sampler=ALWAYS_ON, resource=Resource.create(attributes))
        provider.add_span_processor(
            self._processor or BatchSpanProcessor(make_exporter(self.config))
        )
        self._provider = provider
        self._spans = SpanFactory(provider.get_tracer("gateway"))
        where = "injected" if self._processor else self.config.exporter
        if not self._processor and self.config.exporter != "console":
            where += f" to {self.config.url}"
        log.info("tracing on: exporter %s, 1 request in %d", where, self.config.rate)

    def begin(
        self,
        method: str,
        raw_path: bytes,
        binding: Binding,
        params: Mapping[str, str],
        headers: Mapping[str, str],
    ) -> RequestSpan | None:
        """A SERVER span for this inference request if it is sampled, else None (the
        caller's trace headers then go on unchanged)."""
        if self._spans is None:
            return None
        parent = self._spans.extract(headers)
        if not self.sample(parent is not None and self._spans.sampled(parent)):
            return None
        return self._spans.begin(method, raw_path, binding, params, parent)

    def sample(self, parent_sampled: bool) -> bool:
        """Trace this request? (Counts it against ``rate`` and ``count``.)"""
        if self._left == 0:
            return False
        if not parent_sampled:
            seen, self._seen = self._seen, self._seen + 1
            if seen % self.config.rate:
                return False
        if self._left > 0:
            self._left -= 1
        return True

    def shutdown(self) -> None:
        """Flush and stop the exporter (blocking: call it off the event loop)."""
        if self._provider is not None:
            self._provider.shutdown()


def _version() -> str:
    try:
        return metadata.version("triton-compatible-server")
    except metadata.PackageNotFoundError:  # pragma: no cover - run from a bare checkout
        return "0.0.0"
