"""Triton's ``--trace-config`` (OpenTelemetry mode): its grammar, the values it sets, and the
exporter they name. The service and the gateway both take the flag, so one set of values
configures both processes' spans; each keeps its own sampling state.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from opentelemetry.sdk.trace.export import SpanExporter

__all__ = [
    "TRACE_EXPORTERS",
    "Levels",
    "Sampler",
    "Scope",
    "TraceSettings",
    "make_exporter",
    "parse_trace_config",
    "tracing_on",
]

#: ``otlp-http`` is what Triton's OpenTelemetry mode uses; ``console`` prints spans.
TRACE_EXPORTERS = ("otlp-http", "otlp-grpc", "console")


def tracing_on(level: str, count: int) -> bool:
    """Whether settings with this level and traces left take any trace."""
    return level != "OFF" and count != 0


@dataclass(frozen=True)
class TraceSettings:
    """Triton's ``--trace-config`` values (OpenTelemetry mode only)."""

    level: str = "OFF"  # OFF or TIMESTAMPS
    rate: int = 1000  # trace 1 request in ``rate`` (a caller's sampled traceparent: always)
    count: int = -1  # traces left to take; -1: no limit
    exporter: str = "otlp-http"
    url: str = "http://localhost:4318/v1/traces"
    resource: tuple[tuple[str, str], ...] = ()

    @property
    def on(self) -> bool:
        return tracing_on(self.level, self.count)


def _trace_int(name: str, text: str, minimum: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"--trace-config {name}: expected an integer, got '{text}'") from None
    if value < minimum:
        raise ValueError(f"--trace-config {name}: must be >= {minimum}, got {value}")
    return value


def parse_trace_config(specs: Sequence[str]) -> TraceSettings:
    """``key=value`` (level, rate, count) or ``opentelemetry,key=value`` (exporter, url,
    resource)."""
    values: dict[str, object] = {}
    resource: list[tuple[str, str]] = []
    for spec in specs:
        mode, comma, setting = spec.partition(",")
        if not comma:
            mode, setting = "", spec
        key, equals, value = setting.partition("=")
        if not equals:
            raise ValueError(f"--trace-config '{spec}': expected [mode,]key=value")
        if mode not in ("", "opentelemetry"):
            raise ValueError(f"--trace-config '{spec}': only the opentelemetry mode is supported")
        if mode and key == "url":
            values["url"] = value if "://" in value else f"http://{value}"
        elif mode and key == "exporter":
            if value not in TRACE_EXPORTERS:
                raise ValueError(f"--trace-config exporter: one of {', '.join(TRACE_EXPORTERS)}")
            values["exporter"] = value
        elif mode and key == "resource":
            name, eq, text = value.partition("=")
            if not eq or not name:
                raise ValueError(f"--trace-config '{spec}': expected resource=<key>=<value>")
            resource.append((name, text))
        elif not mode and key == "level":
            if value not in ("OFF", "TIMESTAMPS"):
                raise ValueError(
                    "--trace-config level: OFF or TIMESTAMPS (tensor contents are never traced)"
                )
            values["level"] = value
        elif not mode and key == "rate":
            values["rate"] = _trace_int("rate", value, 1)
        elif not mode and key == "count":
            values["count"] = _trace_int("count", value, -1)
        elif not mode and key == "mode":
            if value != "opentelemetry":
                raise ValueError("--trace-config mode: only 'opentelemetry' is supported")
        else:
            raise ValueError(f"--trace-config '{spec}': unknown setting '{key}'")
    return TraceSettings(resource=tuple(resource), **values)  # type: ignore[arg-type]


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


@dataclass(frozen=True, slots=True)
class Levels:
    """The global sampling settings."""

    level: str
    rate: int
    count: int


@dataclass(frozen=True, slots=True)
class Scope:
    """A model's own sampling settings; None inherits the global value."""

    level: str | None = None
    rate: int | None = None
    count: int | None = None


class Sampler:
    """Which requests get a span, by Triton's rule: a caller's sampled ``traceparent`` is
    always followed; otherwise 1 request in ``rate``, while ``count`` (unless -1) lasts. A
    model with its own settings has its own rate counter (and its own count, if it sets one).
    The owner changes ``base``, ``models`` and ``counters`` as settings change."""

    def __init__(self, settings: TraceSettings) -> None:
        self.base = Levels(settings.level, settings.rate, settings.count)
        self.models: dict[str, Scope] = {}
        self.counters: dict[str, int] = {}  # requests seen per sampling scope ("": global)

    def effective(self, model: str = "") -> tuple[str, int, int]:
        """The (level, rate, count) in effect for ``model`` (or globally)."""
        base = self.base
        scope = self.models.get(model) if model else None
        if scope is None:
            return base.level, base.rate, base.count
        return (
            base.level if scope.level is None else scope.level,
            base.rate if scope.rate is None else scope.rate,
            base.count if scope.count is None else scope.count,
        )

    def sample(self, model: str, parent_sampled: bool) -> bool:
        """Trace this request? (Counts it against ``rate`` and ``count``.)"""
        level, rate, count = self.effective(model)
        if not tracing_on(level, count):
            return False
        scope = model if model in self.models else ""
        if not parent_sampled:
            seen = self.counters.get(scope, 0)
            self.counters[scope] = seen + 1
            if seen % rate:
                return False
        if count > 0:
            self._spend(model, count - 1)
        return True

    def _spend(self, model: str, left: int) -> None:
        scope = self.models.get(model)
        if scope is not None and scope.count is not None:
            self.models[model] = replace(scope, count=left)
        else:
            self.base = replace(self.base, count=left)
