"""OpenTelemetry tracing: settings (global and per model, changed at run time by
TraceSetting), sampling, and the tracer provider with its exporter.

``active`` is a plain attribute the handlers read before anything else: while every level
is OFF a request pays one attribute check. The SDK's provider and exporter are built the
first time a level turns on, so a server that never traces starts no exporter thread.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from wire.tracing import (
    Sampler,
    Scope,
    TraceSettings,
    join_levels,
    level_names,
    make_exporter,
)

from ..errors import InvalidArgument, Unimplemented
from .triton_trace import TraceLog, TritonTrace

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
    from opentelemetry.trace import Tracer

__all__ = ["TRACE_SERVICE_NAME", "Tracing", "make_exporter"]

log = logging.getLogger(__name__)

#: The ``service.name`` resource of the spans: Triton's (src/tracer.cc), which tracing
#: backends and dashboards built for Triton filter on. ``resource=`` settings override it.
TRACE_SERVICE_NAME = "triton-inference-server"

_LEVELS = ("OFF", "TIMESTAMPS", "TENSORS")


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
        if value not in _LEVELS:
            raise InvalidArgument(f"unknown trace level '{value}'")
    if "OFF" in values and len(values) > 1:
        raise InvalidArgument("Expect only one trace level 'OFF' is specified")
    return join_levels(values)


class Tracing:
    def __init__(self, settings: TraceSettings, processor: SpanProcessor | None = None) -> None:
        self._startup = settings
        self._sampling = Sampler(settings)
        self._processor = processor  # tests inject one; otherwise built from settings
        self._provider: TracerProvider | None = None
        self.tracer: Tracer | None = None
        self.active = False
        # Triton's own mode: a trace file, no OpenTelemetry (docs/decisions/032-trace-modes.md)
        self.trace_log: TraceLog | None = None
        # a model's own log_frequency (TraceSetting; Triton's mode): the trace log's copy
        self._model_frequency: dict[str, int] = {}
        if settings.mode == "triton" and settings.file:
            self.trace_log = TraceLog(settings.file, settings.log_frequency)
            self._model_frequency = self.trace_log.model_frequency
        self._refresh()

    # --- settings (TraceSetting) ---------------------------------------------------------

    def snapshot(self, model: str = "") -> dict[str, list[str]]:
        """The settings in effect for ``model`` (or globally), as TraceSetting reports them."""
        level, rate, count = self._sampling.effective(model)
        settings = {
            "trace_level": level_names(level),
            "trace_rate": [str(rate)],
            "trace_count": [str(count)],
            "trace_mode": [self._startup.mode],
        }
        if self._startup.mode == "triton":
            settings["trace_file"] = [self._startup.file]
            settings["log_frequency"] = [str(self._model_frequency.get(model, self.log_frequency))]
        else:
            settings["url"] = [self._startup.url]
            settings["exporter"] = [self._startup.exporter]
        return settings

    @property
    def log_frequency(self) -> int:
        return self.trace_log.log_frequency if self.trace_log else self._startup.log_frequency

    def update(self, changes: Mapping[str, Sequence[str]], model: str = "") -> dict[str, list[str]]:
        """Validate every change, then apply: an empty list clears (model: back to the
        global value; global: back to the start-up value)."""
        if "trace_file" in changes:
            raise Unimplemented("trace file location can not be updated through network protocol")
        parsed: dict[str, int | str | None] = {}
        frequency = changes.get("log_frequency")
        value: int | None = None
        if frequency is not None and self._startup.mode == "triton":
            # a model's: its own until cleared; global: cleared, the start-up value
            value = _one_int("log_frequency", frequency, 0) if frequency else None
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
        if frequency is not None and self._startup.mode == "triton":
            if model and value is None:
                self._model_frequency.pop(model, None)
            elif model:
                self._model_frequency[model] = value  # type: ignore[assignment]
            elif self.trace_log is not None:
                self.trace_log.log_frequency = (
                    self._startup.log_frequency if value is None else value
                )
        if model:
            scope = replace(self._sampling.models.get(model, Scope()), **parsed)  # type: ignore[arg-type]
            if scope == Scope() and model not in self._model_frequency:
                self._sampling.models.pop(model, None)  # nothing of its own: the global one
            else:
                self._sampling.models[model] = scope
            self._sampling.counters.pop(model, None)
        else:
            restored = {f: getattr(self._startup, f) if v is None else v for f, v in parsed.items()}
            self._sampling.base = replace(self._sampling.base, **restored)  # type: ignore[arg-type]
            self._sampling.counters.pop("", None)
        self._refresh()
        return self.snapshot(model)

    def _refresh(self) -> None:
        levels = [self._sampling.base.level, *(s.level for s in self._sampling.models.values())]
        self.active = any(level not in (None, "OFF") for level in levels)
        if self._startup.mode == "triton":
            # Triton: no trace file named, no trace ("trace file name is not given")
            self.active = self.active and self.trace_log is not None
        elif self.active and self._provider is None:
            self._start_provider()

    def begin_triton_child(self, request: Any, parent_id: int) -> TritonTrace | None:
        """Triton's mode: the child trace of a BLS request whose maker's trace is
        ``parent_id`` (children are not sampled again: the parent was)."""
        if self.trace_log is None:
            return None
        return self._triton_trace(request, "", parent_id)

    def begin_triton(self, request: Any, parent_sampled: bool) -> TritonTrace | None:
        """Triton's mode: a trace for this request if it is sampled."""
        if self.trace_log is None or not self.sample(request.model_name, parent_sampled):
            return None
        model = request.model_name
        own = model in self._sampling.models or model in self._model_frequency
        return self._triton_trace(request, model if own else "", 0)

    def _triton_trace(self, request: Any, scope: str, parent_id: int) -> TritonTrace:
        """A trace in the file at the level the request's model is traced at."""
        assert self.trace_log is not None
        names = level_names(self._sampling.effective(request.model_name)[0])
        return TritonTrace(
            self.trace_log,
            request,
            tensors="TENSORS" in names,
            timestamps="TIMESTAMPS" in names,
            done=self._count_done,
            scope=scope,
            parent_id=parent_id,
        )

    def _count_done(self) -> bool:
        """Triton writes the traces at once when ``count`` is spent and all are written."""
        assert self.trace_log is not None
        base = self._sampling.base
        seen = self._sampling.counters.get("", 0)
        return base.count == 0 and self.trace_log.collected + 1 >= seen

    # --- sampling ------------------------------------------------------------------------

    def sample(self, model: str, parent_sampled: bool) -> bool:
        """Trace this request? A caller's sampled ``traceparent`` is always followed;
        otherwise 1 request in ``rate``, while ``count`` (if not -1) lasts."""
        return self._sampling.sample(model, parent_sampled)

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
        """Flush and stop the exporter, or close the trace file (blocking: call it off
        the event loop)."""
        if self._provider is not None:
            self._provider.shutdown()
        if self.trace_log is not None:
            self.trace_log.close()
