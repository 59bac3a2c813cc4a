"""Start-up values of the log and trace settings (flags), shared by config and telemetry;
the trace grammar and values are the ones the gateway shares (``wire.tracing``).

Plain frozen values: the run-time state that LogSettings / TraceSetting change lives in
``logs.LogControl`` and ``tracing.Tracing``.
"""

from __future__ import annotations

from dataclasses import dataclass

from wire.tracing import TRACE_EXPORTERS, TraceSettings, parse_trace_config

__all__ = [
    "LOG_FORMATS",
    "TRACE_EXPORTERS",
    "LogSettings",
    "TraceSettings",
    "parse_trace_config",
]

#: ``default`` and ``ISO8601`` are Triton's line formats; ``json`` writes JSON lines.
LOG_FORMATS = ("default", "ISO8601", "json")


@dataclass(frozen=True)
class LogSettings:
    verbose_level: int = 0
    info: bool = True
    warning: bool = True
    error: bool = True
    format: str = "default"
    file: str = ""
