"""Triton's ``--trace-config``: its grammar, the values it sets, and the
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
    "BSP_SETTINGS",
    "TRACE_EXPORTERS",
    "TRACE_MODES",
    "Levels",
    "Sampler",
    "Scope",
    "TraceSettings",
    "join_levels",
    "level_names",
    "make_exporter",
    "parse_trace_config",
    "tracing_on",
]

#: ``otlp-http`` is what Triton's OpenTelemetry mode uses; ``console`` prints spans.
TRACE_EXPORTERS = ("otlp-http", "otlp-grpc", "console")


def tracing_on(level: str, count: int) -> bool:
    """Whether settings with this level and traces left take any trace."""
    return level != "OFF" and count != 0


#: The trace modes, as Triton names them.
TRACE_MODES = ("triton", "opentelemetry")

#: OpenTelemetry batch span processor settings (Triton's ``opentelemetry,bsp_*``).
BSP_SETTINGS = ("bsp_max_queue_size", "bsp_schedule_delay", "bsp_max_export_batch_size")


def level_names(level: str) -> list[str]:
    """A level as TraceSetting lists it: ``TIMESTAMPS,TENSORS`` -> both names."""
    return level.split(",")


def join_levels(names: Sequence[str]) -> str:
    """Triton's level bit set from names (OFF alone, or TIMESTAMPS and/or TENSORS)."""
    chosen = [n for n in ("TIMESTAMPS", "TENSORS") if n in names]
    return ",".join(chosen) if chosen and "OFF" not in names else "OFF"


@dataclass(frozen=True)
class TraceSettings:
    """Triton's ``--trace-config`` values: the global ones (level, rate, count, mode), the
    triton mode's (file, log-frequency) and the opentelemetry mode's."""

    level: str = "OFF"  # OFF, TIMESTAMPS, TENSORS or TIMESTAMPS,TENSORS
    rate: int = 1000  # trace 1 request in ``rate`` (a caller's sampled traceparent: always)
    count: int = -1  # traces left to take; -1: no limit
    exporter: str = "otlp-http"
    url: str = "http://localhost:4318/v1/traces"
    resource: tuple[tuple[str, str], ...] = ()
    mode: str = "opentelemetry"  # or "triton": Triton's JSON trace file
    file: str = ""  # triton mode: the trace file (prefix of the indexed files)
    log_frequency: int = 0  # triton mode: traces per indexed file; 0: one file at exit
    bsp: tuple[tuple[str, int], ...] = ()  # opentelemetry,bsp_*: batch span processor
    ignored: tuple[str, ...] = ()  # settings Triton accepts and nothing here reads

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


def _trace_level(text: str) -> str:
    """Triton's ``ParseTraceLevelOption`` (any case)."""
    lowered = text.lower()
    if lowered in ("false", "off"):
        return "OFF"
    if lowered in ("true", "on", "min", "max", "timestamps"):
        return "TIMESTAMPS"
    if lowered == "tensors":
        return "TENSORS"
    raise ValueError(f"invalid value for trace level option: {text}")


def _trace_mode(text: str) -> str:
    if text.lower() not in TRACE_MODES:
        raise ValueError(
            f"invalid value for trace mode option: {text}. "
            'Available options are "triton" and "opentelemetry"'
        )
    return text.lower()


def parse_trace_config(specs: Sequence[str]) -> TraceSettings:
    """Triton's ``--trace-config``: ``<setting>=<value>`` (level, rate, count, mode) or
    ``<mode>,<setting>=<value>`` (triton: file, log-frequency; opentelemetry: url,
    exporter, resource, bsp_*). Levels add up (``OFF`` anywhere wins). The mode is the
    ``mode=`` given, else triton when a triton setting is given, else opentelemetry
    (docs/decisions/032-trace-modes.md). Settings Triton ignores are kept in ``ignored``."""
    values: dict[str, object] = {}
    resource: list[tuple[str, str]] = []
    bsp: dict[str, int] = {}
    levels: list[str] = []
    ignored: list[str] = []
    mode = ""
    triton_given = False
    for spec in specs:
        comma = spec.find(",")
        equals = spec.find("=", comma + 1)
        if comma == 0:
            raise ValueError(
                "No trace mode specified. --trace-config option format is "
                f"<trace mode>,<setting>=<value> or <setting>=<value>. Got {spec}"
            )
        section = _trace_mode(spec[:comma]) if comma > 0 else ""
        key, value = spec[comma + 1 : equals], spec[equals + 1 :]
        if equals < 0 or not key or not value:
            raise ValueError(
                "--trace-config option format is '<trace mode>,<setting>=<value>'. "
                f"Got {spec} (expected [mode,]key=value)"
            )
        if section == "triton":
            triton_given = True
            if key == "file":
                values["file"] = value
            elif key == "log-frequency":
                values["log_frequency"] = _trace_int("log-frequency", value, 0)
            else:
                ignored.append(spec)
        elif section and key == "url":
            values["url"] = value if "://" in value else f"http://{value}"
        elif section and key == "exporter":
            if value not in TRACE_EXPORTERS:
                raise ValueError(f"--trace-config exporter: one of {', '.join(TRACE_EXPORTERS)}")
            values["exporter"] = value
        elif section and key == "resource":
            name, eq, text = value.partition("=")
            if not eq or not name:
                raise ValueError(f"--trace-config '{spec}': expected resource=<key>=<value>")
            resource.append((name, text))
        elif section and key in BSP_SETTINGS:
            bsp[key] = _trace_int(key, value, 0)
        elif not section and key == "level":
            levels.append(_trace_level(value))
        elif not section and key == "rate":
            values["rate"] = _trace_int("rate", value, 1)
        elif not section and key == "count":
            values["count"] = _trace_int("count", value, -1)
        elif not section and key == "mode":
            mode = _trace_mode(value)
        else:
            ignored.append(spec)
    if levels:
        values["level"] = join_levels(levels)
    return TraceSettings(
        resource=tuple(resource),
        mode=mode or ("triton" if triton_given else "opentelemetry"),
        bsp=tuple(sorted(bsp.items())),
        ignored=tuple(ignored),
        **values,  # type: ignore[arg-type]
    )


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
            # the rate-th request, the 2*rate-th, ... (Triton: ``++sample_ % rate_ == 0``)
            seen = self.counters.get(scope, 0) + 1
            self.counters[scope] = seen
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
