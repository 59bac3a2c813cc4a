"""OpenTelemetry tracing: settings (global and per model, changed at run time by
TraceSetting), sampling, and the tracer provider with its exporter.

``active`` is a plain attribute the handlers read before anything else: while every level
is OFF a request pays one attribute check. The SDK's provider and exporter are built the
first time a level turns on, so a server that never traces starts no exporter thread.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from ..errors import InvalidArgument, Unimplemented
from .settings import TraceSettings

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter
    from opentelemetry.trace import Tracer

__all__ = ["TRACE_SERVICE_NAME", "Tracing", "make_exporter"]

log = logging.getLogger(__name__)

#: The ``service.name`` resource of the spans: Triton's (src/tracer.cc), which tracing
#: backends and dashboards built for Triton filter on. ``resource=`` settings override it.
TRACE_SERVICE_NAME = "triton-inference-server"

_LEVELS = ("OFF", "TIMESTAMPS")


@dataclass(frozen=True)
class _Scope:
    """Per-model overrides: None inherits the global value."""

    level: str | None = None
    rate: int | None = None
    count: int | None = None


def make_exporter(settings: TraceSettings) -> SpanExporter:
    """The exporter ``--trace-config opentelemetry,exporter=...`` names (imported lazily)."""
    if settings.exporter == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter()
    if settings.exporter == "otlp-grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
            OTLPSpanExporter as GrpcExporter,
        )

        return GrpcExporter(endpoint=settings.url)
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter(endpoint=settings.url)


def _one_int(name: str, values: Sequence[str], minimum: int) -> int:
    if len(values) != 1:
        raise InvalidArgument(f"expect only 1 value for '{name}'")
    try:
        value = int(values[0])
    except ValueError:
        raise InvalidArgument(f"Unable to parse '{name}', got: {values[0]}") from None
    if value < minimum:
        raise InvalidArgument(
            f"Unable to parse '{name}'. Expecting value >= {minimum}, got: {values[0]}"
        )
    return value


def _level(values: Sequence[str]) -> str:
    for value in values:
        if value == "TENSORS":
            raise InvalidArgument(
                "trace level 'TENSORS' is not supported: tensors are never traced"
            )
        if value not in _LEVELS:
            raise InvalidArgument(f"unknown trace level '{value}'")
    if "OFF" in values and len(values) > 1:
        raise InvalidArgument("Expect only one trace level 'OFF' is specified")
    return values[0]


class Tracing:
    def __init__(self, settings: TraceSettings, processor: SpanProcessor | None = None) -> None:
        self._startup = settings
        self._global = settings
        self._models: dict[str, _Scope] = {}
        self._counters: dict[str, int] = {}  # requests seen per sampling scope
        self._processor = processor  # tests inject one; otherwise built from settings
        self._provider: TracerProvider | None = None
        self.tracer: Tracer | None = None
        self.active = False
        self._refresh()

    # --- settings (TraceSetting) ---------------------------------------------------------

    def snapshot(self, model: str = "") -> dict[str, list[str]]:
        """The settings in effect for ``model`` (or globally), as TraceSetting reports them."""
        level, rate, count = self._effective(model)
        return {
            "trace_level": [level],
            "trace_rate": [str(rate)],
            "trace_count": [str(count)],
            "trace_mode": ["opentelemetry"],
            "url": [self._startup.url],
            "exporter": [self._startup.exporter],
        }

    def update(self, changes: Mapping[str, Sequence[str]], model: str = "") -> dict[str, list[str]]:
        """Validate every change, then apply: an empty list clears (model: back to the
        global value; global: back to the start-up value)."""
        if "trace_file" in changes:
            raise Unimplemented("trace file location can not be updated through network protocol")
        parsed: dict[str, int | str | None] = {}
        for name, values in changes.items():
            if name not in ("trace_level", "trace_rate", "trace_count"):
                continue  # Triton ignores settings it does not know
            field = name.removeprefix("trace_")
            if not values:
                parsed[field] = None
            elif field == "level":
                parsed[field] = _level(values)
            else:
                parsed[field] = _one_int(name, values, 1 if field == "rate" else -1)
        if model:
            scope = self._models.get(model, _Scope())
            self._models[model] = replace(scope, **parsed)  # type: ignore[arg-type]
            self._counters.pop(model, None)
        else:
            restored = {f: getattr(self._startup, f) if v is None else v for f, v in parsed.items()}
            self._global = replace(self._global, **restored)  # type: ignore[arg-type]
            self._counters.pop("", None)
        self._refresh()
        return self.snapshot(model)

    def _effective(self, model: str) -> tuple[str, int, int]:
        scope = self._models.get(model) if model else None
        if scope is None:
            return self._global.level, self._global.rate, self._global.count
        return (
            self._global.level if scope.level is None else scope.level,
            self._global.rate if scope.rate is None else scope.rate,
            self._global.count if scope.count is None else scope.count,
        )

    def _refresh(self) -> None:
        levels = [self._global.level, *(s.level for s in self._models.values())]
        self.active = any(level not in (None, "OFF") for level in levels)
        if self.active and self._provider is None:
            self._start_provider()

    # --- sampling ------------------------------------------------------------------------

    def sample(self, model: str, parent_sampled: bool) -> bool:
        """Trace this request? A caller's sampled ``traceparent`` is always followed;
        otherwise 1 request in ``rate``, while ``count`` (if not -1) lasts."""
        level, rate, count = self._effective(model)
        if level == "OFF" or count == 0:
            return False
        scope = model if model in self._models else ""
        if not parent_sampled:
            seen = self._counters.get(scope, 0)
            self._counters[scope] = seen + 1
            if seen % rate:
                return False
        if count > 0:
            self._spend(model, count - 1)
        return True

    def _spend(self, model: str, left: int) -> None:
        scope = self._models.get(model)
        if scope is not None and scope.count is not None:
            self._models[model] = replace(scope, count=left)
        else:
            self._global = replace(self._global, count=left)

    # --- provider ------------------------------------------------------------------------

    def _start_provider(self) -> None:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.sdk.trace.sampling import ALWAYS_ON

        from .. import __version__

        attributes = {"service.name": TRACE_SERVICE_NAME, "service.version": __version__}
        attributes.update(dict(self._startup.resource))
        # Sampling is decided here (rate, count, the caller's flag), so the SDK records
        # every span it is asked for, even under a caller's unsampled traceparent.
        self._provider = TracerProvider(sampler=ALWAYS_ON, resource=Resource.create(attributes))
        processor = self._processor or BatchSpanProcessor(make_exporter(self._startup))
        self._provider.add_span_processor(processor)
        self.tracer = self._provider.get_tracer("service")
        log.info(
            "tracing on: exporter %s", "injected" if self._processor else self._startup.exporter
        )

    def shutdown(self) -> None:
        """Flush and stop the exporter (blocking: call it off the event loop)."""
        if self._provider is not None:
            self._provider.shutdown()
