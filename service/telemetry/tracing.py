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
from typing import TYPE_CHECKING

from wire.tracing import Sampler, Scope, TraceSettings, make_exporter

from ..errors import InvalidArgument, Unimplemented

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
    from opentelemetry.trace import Tracer

__all__ = ["TRACE_SERVICE_NAME", "Tracing", "make_exporter"]

log = logging.getLogger(__name__)

#: The ``service.name`` resource of the spans: Triton's (src/tracer.cc), which tracing
#: backends and dashboards built for Triton filter on. ``resource=`` settings override it.
TRACE_SERVICE_NAME = "triton-inference-server"

_LEVELS = ("OFF", "TIMESTAMPS")


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
        self._sampling = Sampler(settings)
        self._processor = processor  # tests inject one; otherwise built from settings
        self._provider: TracerProvider | None = None
        self.tracer: Tracer | None = None
        self.active = False
        self._refresh()

    # --- settings (TraceSetting) ---------------------------------------------------------

    def snapshot(self, model: str = "") -> dict[str, list[str]]:
        """The settings in effect for ``model`` (or globally), as TraceSetting reports them."""
        level, rate, count = self._sampling.effective(model)
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
            scope = self._sampling.models.get(model, Scope())
            self._sampling.models[model] = replace(scope, **parsed)  # type: ignore[arg-type]
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
        if self.active and self._provider is None:
            self._start_provider()

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
        """Flush and stop the exporter (blocking: call it off the event loop)."""
        if self._provider is not None:
            self._provider.shutdown()
