"""Start-up values of the log and trace settings (flags), shared by config and telemetry.

Plain frozen values: the run-time state that LogSettings / TraceSetting change lives in
``logs.LogControl`` and ``tracing.Tracing``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

__all__ = [
    "LOG_FORMATS",
    "TRACE_EXPORTERS",
    "LogSettings",
    "TraceSettings",
    "parse_trace_config",
]

#: ``default`` and ``ISO8601`` are Triton's line formats; ``json`` writes JSON lines.
LOG_FORMATS = ("default", "ISO8601", "json")
#: ``otlp-http`` is what Triton's OpenTelemetry mode uses; ``console`` prints spans.
TRACE_EXPORTERS = ("otlp-http", "otlp-grpc", "console")


@dataclass(frozen=True)
class LogSettings:
    verbose_level: int = 0
    info: bool = True
    warning: bool = True
    error: bool = True
    format: str = "default"
    file: str = ""


@dataclass(frozen=True)
class TraceSettings:
    """Triton's ``--trace-config`` values (OpenTelemetry mode only)."""

    level: str = "OFF"  # OFF or TIMESTAMPS
    rate: int = 1000  # trace 1 request in ``rate``
    count: int = -1  # traces left to take; -1: no limit
    exporter: str = "otlp-http"
    url: str = "http://localhost:4318/v1/traces"
    resource: tuple[tuple[str, str], ...] = field(default_factory=tuple)


def _int(name: str, text: str, minimum: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"--trace-config {name}: expected an integer, got '{text}'") from None
    if value < minimum:
        raise ValueError(f"--trace-config {name}: must be >= {minimum}, got {value}")
    return value


def parse_trace_config(specs: Sequence[str]) -> TraceSettings:
    """``key=value`` (global) or ``opentelemetry,key=value`` (exporter settings)."""
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
            values["rate"] = _int("rate", value, 1)
        elif not mode and key == "count":
            values["count"] = _int("count", value, -1)
        elif not mode and key == "mode":
            if value != "opentelemetry":
                raise ValueError("--trace-config mode: only 'opentelemetry' is supported")
        else:
            raise ValueError(f"--trace-config '{spec}': unknown setting '{key}'")
    return TraceSettings(resource=tuple(resource), **values)  # type: ignore[arg-type]
