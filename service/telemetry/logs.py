"""Logging set-up and the run-time log settings (Triton's LogSettings names and rules).

One handler on the root logger (stderr or ``--log-file``) with a filter that applies
``log_info`` / ``log_warning`` / ``log_error`` / ``log_verbose_level``; the root level is
kept at the lowest enabled level, so a disabled ``log.debug`` costs one level check.
Verbose messages are DEBUG records; ``extra={"verbose": N}`` makes one need level N.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Mapping
from dataclasses import asdict, replace
from typing import Any, TextIO

from ..errors import InvalidArgument, Unimplemented
from .settings import LOG_FORMATS, LogSettings

__all__ = ["CONTEXT_FIELDS", "LogControl", "LogValue"]

LogValue = bool | int | str
#: Request context a record may carry (``extra=``); JSON lines write them as fields.
CONTEXT_FIELDS = ("rpc", "model", "version", "request_id", "code")

# Triton's setting name -> (LogSettings field, expected type name in errors, Python type).
_SETTINGS: dict[str, tuple[str, str, type]] = {
    "log_info": ("info", "boolean", bool),
    "log_warning": ("warning", "boolean", bool),
    "log_error": ("error", "boolean", bool),
    "log_verbose_level": ("verbose_level", "int32", int),
    "log_format": ("format", "string", str),
}
_LETTERS = {"DEBUG": "I", "INFO": "I", "WARNING": "W", "ERROR": "E", "CRITICAL": "E"}


class _TritonFormatter(logging.Formatter):
    """``I1121 12:34:56.789012 4242 app.py:55] message`` (Triton's default layout), or the
    ISO8601 variant ``2026-11-21T12:34:56Z I 4242 app.py:55] message``."""

    def __init__(self, iso8601: bool) -> None:
        super().__init__()
        self._iso = iso8601

    def format(self, record: logging.LogRecord) -> str:
        letter = _LETTERS.get(record.levelname, "I")
        where = f"{record.process} {record.filename}:{record.lineno}]"
        stamp = time.gmtime(record.created)
        if self._iso:
            head = f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', stamp)} {letter} {where}"
        else:
            micros = int((record.created % 1) * 1_000_000)
            head = f"{letter}{time.strftime('%m%d %H:%M:%S', stamp)}.{micros:06d} {where}"
        text = f"{head} {record.getMessage()}"
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        return text


class _JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, where, message, request context."""

    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        line: dict[str, Any] = {
            "time": f"{stamp}.{int((record.created % 1) * 1_000_000):06d}Z",
            "level": "VERBOSE" if record.levelno == logging.DEBUG else record.levelname,
            "pid": record.process,
            "logger": record.name,
            "where": f"{record.filename}:{record.lineno}",
            "message": record.getMessage(),
        }
        for name in CONTEXT_FIELDS:
            if hasattr(record, name):
                line[name] = getattr(record, name)
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False)


def _formatter(name: str) -> logging.Formatter:
    return _JsonFormatter() if name == "json" else _TritonFormatter(iso8601=name == "ISO8601")


class LogControl:
    """Owns the process's log handler; reads and changes the settings at run time."""

    def __init__(self, settings: LogSettings, stream: TextIO | None = None) -> None:
        self._settings = settings
        self._handler: logging.Handler = (
            logging.FileHandler(settings.file, encoding="utf-8")
            if settings.file
            else logging.StreamHandler(stream or sys.stderr)
        )
        self._handler.addFilter(self._enabled)
        root = logging.getLogger()
        for old in list(root.handlers):
            root.removeHandler(old)
        root.addHandler(self._handler)
        self._apply()

    @property
    def settings(self) -> LogSettings:
        return self._settings

    def snapshot(self) -> dict[str, LogValue]:
        """Every setting under Triton's name, as the LogSettings RPC reports them."""
        current = asdict(self._settings)
        out: dict[str, LogValue] = {"log_file": self._settings.file}
        out.update({name: current[field] for name, (field, _, _) in _SETTINGS.items()})
        return out

    def update(self, changes: Mapping[str, LogValue | None]) -> dict[str, LogValue]:
        """Validate every change first, then apply them together (all or nothing)."""
        if "log_file" in changes:
            raise Unimplemented("log file location can not be updated through network protocol")
        values: dict[str, LogValue] = {}
        for name, value in changes.items():
            known = _SETTINGS.get(name)
            if known is None:
                continue  # Triton ignores settings it does not know
            field, type_name, kind = known
            if value is None or type(value) is not kind:
                raise InvalidArgument(f"expect {type_name} for '{name}'")
            if name == "log_format" and value not in LOG_FORMATS:
                raise InvalidArgument(f"invalid argument for log_format, got: {value}")
            values[field] = value
        if values:
            self._settings = replace(self._settings, **values)  # type: ignore[arg-type]
            self._apply()
        return self.snapshot()

    def close(self) -> None:
        logging.getLogger().removeHandler(self._handler)
        self._handler.close()

    def _apply(self) -> None:
        s = self._settings
        self._handler.setFormatter(_formatter(s.format))
        if s.verbose_level > 0:
            level = logging.DEBUG
        elif s.info:
            level = logging.INFO
        elif s.warning:
            level = logging.WARNING
        else:
            level = logging.ERROR  # ERROR records still go through the filter below
        logging.getLogger().setLevel(level)

    def _enabled(self, record: logging.LogRecord) -> bool:
        s = self._settings
        if record.levelno >= logging.ERROR:
            return s.error
        if record.levelno >= logging.WARNING:
            return s.warning
        if record.levelno >= logging.INFO:
            return s.info
        return int(getattr(record, "verbose", 1)) <= s.verbose_level
