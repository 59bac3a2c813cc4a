"""The gateway's own OpenTelemetry spans: settings (from ``--trace-config``, then followed
from the service's TraceSetting answers), sampling, and the tracer provider with its
exporter.

``active`` is a plain attribute the app reads before anything else: with tracing off an
inference request pays that one check and its trace headers are forwarded unchanged.
Nothing here imports OpenTelemetry at module level; the SDK, the exporter and
``gateway/spans.py`` are imported by ``start()``, only once tracing is on.

Settings mirror the service's (``service/telemetry/tracing.py``; the flag's grammar and
the exporter are shared, ``wire.tracing``): a global level / rate / count, and per-model
overrides that inherit what they leave unset from the global ones. ``follow()`` applies
what a TraceSetting call made through the gateway answered, so a REST change governs the
gateway's spans as well as the service's (Triton is one process). Exporter, URL and
resource stay the gateway's flags.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from dataclasses import replace
from importlib import metadata
from typing import TYPE_CHECKING

from wire.tracing import Sampler, Scope, TraceSettings, make_exporter, tracing_on

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import SpanProcessor, TracerProvider

    from .routes import Binding
    from .spans import RequestSpan, SpanFactory

__all__ = ["GATEWAY_NAME", "TRACED_RPCS", "Tracing", "make_exporter"]

log = logging.getLogger(__name__)

#: ``service.name`` of the gateway's spans (the service's own spans say
#: ``triton-inference-server``, as Triton's do).
GATEWAY_NAME = "triton-compatible-gateway"

#: The RPCs behind the inference routes (infer, generate, generate_stream): only their
#: requests get a span, as only inferences get one in the service.
TRACED_RPCS = frozenset({"ModelInfer", "ModelStreamInfer"})

#: The TraceSetting keys that decide the gateway's spans (the others are the service's:
#: its exporter and URL, trace mode).
_FOLLOWED = ("trace_level", "trace_rate", "trace_count")


class Tracing:
    """Whether, and under which parent, a request gets a gateway span.

    Sampling follows the service's rule: a caller's sampled ``traceparent`` is always
    followed; otherwise 1 request in ``rate``, while ``count`` (unless -1) lasts; a model
    with its own settings has its own rate counter (and its own count, if it sets one).
    """

    def __init__(self, config: TraceSettings, processor: SpanProcessor | None = None) -> None:
        self.config = config
        # Triton's own trace mode writes a file in the service; the gateway makes no spans.
        self.otel = config.mode == "opentelemetry"
        self.active = config.on and self.otel
        self._sampling = Sampler(config)
        self._processor = processor  # tests inject one; otherwise built from the config
        self._provider: TracerProvider | None = None
        self._spans: SpanFactory | None = None
        #: Requests are served by many threads: settings and counters change under it.
        self._lock = threading.RLock()

    @property
    def started(self) -> bool:
        """Whether the provider was built (it then has spans to flush at exit)."""
        return self._provider is not None

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
        log.info("tracing on: exporter %s, 1 request in %d", where, self._sampling.base.rate)

    # --- settings (followed from TraceSetting) -------------------------------------------

    def settings(self, model: str = "") -> tuple[str, int, int]:
        """The (level, rate, count) in effect for ``model`` (or globally)."""
        return self._sampling.effective(model)

    def follow(
        self,
        model: str,
        requested: Mapping[str, Sequence[str]],
        returned: Mapping[str, Sequence[str]],
    ) -> None:
        """Apply a successful TraceSetting answer (``returned``: the settings in effect
        after the call) for ``model`` or, when empty, globally.

        Globally the answer is taken as it is (a cleared setting comes back as the
        service's start-up value). For a model the answer gives the *effective* values,
        so the override is kept as the service keeps it: a setting the call cleared (empty
        list) inherits the global value again, one it set takes the answer, and one it did
        not name updates only an override the gateway already holds (a GET: a count the
        service spent), never becomes one.
        """
        with self._lock:
            self._follow(model, requested, _parse(returned))

    def _follow(
        self, model: str, requested: Mapping[str, Sequence[str]], values: dict[str, str | int]
    ) -> None:
        before = (self._sampling.base, dict(self._sampling.models))
        if not model:
            self._sampling.base = replace(self._sampling.base, **values)  # type: ignore[arg-type]
        else:
            old = self._sampling.models.get(model, Scope())
            fields: dict[str, str | int | None] = {}
            for key in _FOLLOWED:
                name = key.removeprefix("trace_")
                if key in requested and not requested[key]:
                    fields[name] = None
                elif name in values and (key in requested or getattr(old, name) is not None):
                    fields[name] = values[name]
            scope = replace(old, **fields)  # type: ignore[arg-type]
            if scope == Scope():
                self._sampling.models.pop(model, None)  # nothing of its own: the global settings
            else:
                self._sampling.models[model] = scope
        # As the service does on each TraceSetting call: this scope's rate counter restarts.
        self._sampling.counters.pop(model, None)
        if (self._sampling.base, self._sampling.models) != before:
            level, rate, count = self.settings(model)
            log.info(
                "trace settings from the service (%s): level %s, 1 request in %d, count %d",
                f"model {model!r}" if model else "global",
                level,
                rate,
                count,
            )
        self._refresh()

    def _refresh(self) -> None:
        """``active`` when some scope traces; the provider is built the first time, with
        the gateway's own exporter flags (their defaults if none were given)."""
        self.active = False
        for model in ("", *self._sampling.models):
            level, _, count = self.settings(model)
            self.active = self.otel and (self.active or tracing_on(level, count))
        if not self.active or self._provider is not None:
            return
        try:
            self.start()
        except Exception:  # e.g. an exporter package missing: spans stay off, not requests
            log.exception("could not start the gateway's tracing; its spans stay off")
            self.active = False

    # --- sampling ------------------------------------------------------------------------

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
        sampled = parent is not None and self._spans.sampled(parent)
        with self._lock:
            if not self.sample(sampled, params.get("model_name", "")):
                return None
        return self._spans.begin(method, raw_path, binding, params, parent)

    def sample(self, parent_sampled: bool, model: str = "") -> bool:
        """Trace this request? (Counts it against ``rate`` and ``count``.)"""
        return self._sampling.sample(model, parent_sampled)

    def shutdown(self) -> None:
        """Flush and stop the exporter (blocking: call it off the event loop)."""
        if self._provider is not None:
            self._provider.shutdown()


def _parse(returned: Mapping[str, Sequence[str]]) -> dict[str, str | int]:
    """level / rate / count from a TraceSetting answer; a value the gateway cannot read
    is left out (and logged) rather than guessed."""
    values: dict[str, str | int] = {}
    for key in _FOLLOWED:
        given = list(returned.get(key, ()))
        if not given:
            continue
        name = key.removeprefix("trace_")
        if name == "level":
            if given == ["OFF"]:
                values[name] = "OFF"
            elif "TIMESTAMPS" in given:
                values[name] = "TIMESTAMPS"
            else:
                log.warning("ignoring trace_level %s from the service", given)
            continue
        try:
            number = int(given[0])
        except ValueError:
            number = -2
        if number < (1 if name == "rate" else -1):
            log.warning("ignoring %s %s from the service", key, given)
            continue
        values[name] = number
    return values


def _version() -> str:
    try:
        return metadata.version("triton-compatible-server")
    except metadata.PackageNotFoundError:  # pragma: no cover - run from a bare checkout
        return "0.0.0"
