"""Prometheus metrics in Triton's names, read from the ``ModelStats`` objects at scrape time.

No counter of its own: every value is computed from the same objects ModelStatistics
encodes, when Prometheus asks, so the two always agree and requests pay nothing extra.
Latency summaries and histograms (``--metrics-config``) are the exception: they need each
value, which the model's ``LatencyObserver`` (metrics_latency.py) collects as ``ModelStats``
records it; they are rendered here too.
The text is Prometheus exposition format 0.0.4, written here because prometheus_client
renames counters to ``<name>_total`` while Triton's dashboards query the bare names.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from ..statistics import FAILURE_REASONS, ModelStats
from .metrics_config import LatencyMetrics
from .metrics_latency import LatencyObserver

__all__ = ["CONTENT_TYPE", "MetricsRenderer", "ScrapedModel", "format_number"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class _Scheduler(Protocol):
    @property
    def inflight(self) -> int: ...


class ScrapedModel(Protocol):
    """What a scrape reads of a loaded model version (``core.model.ModelVersion``)."""

    @property
    def name(self) -> str: ...
    @property
    def version(self) -> int: ...
    @property
    def stats(self) -> ModelStats: ...
    @property
    def scheduler(self) -> _Scheduler | None: ...


@dataclass(frozen=True, slots=True)
class _Family:
    name: str
    type: str
    help: str
    value: Callable[[ScrapedModel], int]


# Triton 2.51: one series per reason (model, reason, version: labels in name order).
_FAILURE = "nv_inference_request_failure"
_FAILURE_HELP = "Number of failed inference requests, all batch sizes"


def _us(ns: int) -> int:
    return ns // 1000


_INFERENCE = (
    _Family(
        "nv_inference_request_success",
        "counter",
        "Number of successful inference requests, all batch sizes",
        lambda m: m.stats.success.count,
    ),
    _Family(
        "nv_inference_request_cancelled",
        "counter",
        "Number of inference requests whose caller went away (cancelled, or past its "
        "deadline) before the answer; each is also a success or a failure (not a Triton metric)",
        lambda m: m.stats.cancelled,
    ),
    _Family(
        "nv_inference_count",
        "counter",
        "Number of inferences performed (does not include cached requests)",
        lambda m: m.stats.inference_count,
    ),
    _Family(
        "nv_inference_exec_count",
        "counter",
        "Number of model executions performed (does not include cached requests)",
        lambda m: m.stats.execution_count,
    ),
    _Family(
        "nv_inference_request_duration_us",
        "counter",
        "Cumulative inference request duration in microseconds (includes cached requests)",
        lambda m: _us(m.stats.success.ns),
    ),
    _Family(
        "nv_inference_queue_duration_us",
        "counter",
        "Cumulative inference queuing duration in microseconds (includes cached requests)",
        lambda m: _us(m.stats.queue.ns),
    ),
    _Family(
        "nv_inference_compute_input_duration_us",
        "counter",
        "Cumulative compute input duration in microseconds (does not include cached requests)",
        lambda m: _us(m.stats.compute_input.ns),
    ),
    _Family(
        "nv_inference_compute_infer_duration_us",
        "counter",
        "Cumulative compute inference duration in microseconds (does not include cached requests)",
        lambda m: _us(m.stats.compute_infer.ns),
    ),
    _Family(
        "nv_inference_compute_output_duration_us",
        "counter",
        "Cumulative inference compute output duration in microseconds (does not include "
        "cached requests)",
        lambda m: _us(m.stats.compute_output.ns),
    ),
    _Family(
        "nv_inference_pending_request_count",
        "gauge",
        "Instantaneous number of pending requests awaiting execution per-model "
        "(queued or executing)",
        lambda m: m.scheduler.inflight if m.scheduler is not None else 0,
    ),
)

_CACHE = (
    _Family(
        "nv_cache_num_hits_per_model",
        "counter",
        "Number of cache hits per model",
        lambda m: m.stats.cache_hit.count,
    ),
    _Family(
        "nv_cache_num_misses_per_model",
        "counter",
        "Number of cache misses per model",
        lambda m: m.stats.cache_miss.count,
    ),
    _Family(
        "nv_cache_hit_duration_per_model",
        "counter",
        "Total cache hit duration per model, in microseconds",
        lambda m: _us(m.stats.cache_hit.ns),
    ),
    _Family(
        "nv_cache_miss_duration_per_model",
        "counter",
        "Total cache miss (lookup and insert) duration per model, in microseconds",
        lambda m: _us(m.stats.cache_miss.ns),
    ),
)


_LATENCY_COUNTERS = frozenset(
    {
        "nv_inference_request_duration_us",
        "nv_inference_queue_duration_us",
        "nv_inference_compute_input_duration_us",
        "nv_inference_compute_infer_duration_us",
        "nv_inference_compute_output_duration_us",
    }
)

# (family, help, LatencyObserver.summaries() key); Triton's names, values in microseconds.
_SUMMARIES = (
    (
        "nv_inference_request_summary_us",
        "Summary of inference request duration in microseconds (includes cached requests)",
        "request",
    ),
    (
        "nv_inference_queue_summary_us",
        "Summary of inference queuing duration in microseconds (includes cached requests)",
        "queue",
    ),
    (
        "nv_inference_compute_input_summary_us",
        "Summary of compute input duration in microseconds (does not include cached requests)",
        "compute_input",
    ),
    (
        "nv_inference_compute_infer_summary_us",
        "Summary of compute inference duration in microseconds (does not include cached requests)",
        "compute_infer",
    ),
    (
        "nv_inference_compute_output_summary_us",
        "Summary of inference compute output duration in microseconds (does not include "
        "cached requests)",
        "compute_output",
    ),
)
_FIRST_RESPONSE = "nv_inference_first_response_histogram_ms"
_FIRST_RESPONSE_HELP = "Duration from request to first response in milliseconds"


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def format_number(value: float) -> str:
    """Prometheus text for a value: integral ones without '.0' (as Triton prints them)."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value == int(value):
        return str(int(value))
    return repr(float(value))


def _decimal(ns: int, per_unit: int) -> str:
    """``ns / per_unit`` exactly (no float rounding), trailing zeros dropped."""
    whole, rest = divmod(abs(ns), per_unit)
    sign = "-" if ns < 0 else ""
    if not rest:
        return f"{sign}{whole}"
    digits = len(str(per_unit)) - 1
    return f"{sign}{whole}.{rest:0{digits}d}".rstrip("0")


def _render_failures(lines: list[str], models: list[tuple[ScrapedModel, str]]) -> None:
    """Every reason for every model, zeros included (Triton creates all four at load)."""
    lines.append(f"# HELP {_FAILURE} {_FAILURE_HELP}")
    lines.append(f"# TYPE {_FAILURE} counter")
    for model, _ in models:
        name, version = _label(model.name), model.version
        for reason in FAILURE_REASONS:
            labels = f'model="{name}",{_namespace(model)}reason="{reason}",version="{version}"'
            lines.append(f"{_FAILURE}{{{labels}}} {model.stats.failures[reason]}")


def _namespace(model: ScrapedModel) -> str:
    """Triton's ``namespace`` label (the model's repository), with --model-namespacing
    only; labels are in name order, as prometheus-cpp writes them."""
    namespace = getattr(model, "namespace", "")
    return f'namespace="{_label(namespace)}",' if namespace else ""


def _decoupled(model: ScrapedModel) -> bool:
    """Whether the model's config is decoupled (read only when histograms are on; a
    scraped model without a config counts as not decoupled)."""
    config = getattr(model, "config", None)
    return bool(config is not None and config.model_transaction_policy.decoupled)


class MetricsRenderer:
    """Renders every family for the models ``source`` returns at the moment of the scrape.

    Runs on the event loop thread, the only thread that updates ``ModelStats``, so a
    scrape sees one consistent snapshot with no lock.
    """

    def __init__(
        self,
        source: Callable[[], Iterable[ScrapedModel]],
        *,
        cache_enabled: bool = False,
        extra: Callable[[], str] | None = None,
        latency: LatencyMetrics | None = None,
    ) -> None:
        """``latency``: Triton's ``--metrics-config`` choices (default: counters only);
        ``extra``: text appended to every scrape (the GPU and CPU metrics)."""
        self._source = source
        self._latency = latency or LatencyMetrics()
        families = _INFERENCE + (_CACHE if cache_enabled else ())
        if not self._latency.counters:  # Triton drops the cache counters with them too
            families = tuple(f for f in _INFERENCE if f.name not in _LATENCY_COUNTERS)
        self._families = families
        self._extra = extra

    def render(self) -> bytes:
        models = [
            (m, f'model="{_label(m.name)}",{_namespace(m)}version="{m.version}"')
            for m in self._source()
        ]
        lines: list[str] = []
        for family in self._families:
            lines.append(f"# HELP {family.name} {family.help}")
            lines.append(f"# TYPE {family.name} {family.type}")
            lines.extend(f"{family.name}{{{labels}}} {family.value(m)}" for m, labels in models)
            if family.name == "nv_inference_request_success":
                _render_failures(lines, models)
        if self._latency.histograms:
            self._render_histograms(lines, [(m, lb) for m, lb in models if _decoupled(m)])
        if self._latency.summaries:
            self._render_summaries(lines, models)
        text = "\n".join(lines) + "\n"
        if self._extra is not None:
            text += self._extra()
        return text.encode()

    @staticmethod
    def _render_histograms(lines: list[str], models: list[tuple[ScrapedModel, str]]) -> None:
        """Decoupled models only, as Triton; a model with no observer yet shows zeros."""
        lines.append(f"# HELP {_FIRST_RESPONSE} {_FIRST_RESPONSE_HELP}")
        lines.append(f"# TYPE {_FIRST_RESPONSE} histogram")
        for model, labels in models:
            observer = model.stats.observer
            histogram = observer.first_response if isinstance(observer, LatencyObserver) else None
            if histogram is None:
                continue
            lines.append(f"{_FIRST_RESPONSE}_count{{{labels}}} {histogram.count}")
            lines.append(f"{_FIRST_RESPONSE}_sum{{{labels}}} {_decimal(histogram.sum, 10**6)}")
            for bound, count in zip(histogram.bounds, histogram.cumulative(), strict=True):
                le = format_number(bound / 10**6)
                lines.append(f'{_FIRST_RESPONSE}_bucket{{{labels},le="{le}"}} {count}')
            lines.append(f'{_FIRST_RESPONSE}_bucket{{{labels},le="+Inf"}} {histogram.count}')

    def _render_summaries(self, lines: list[str], models: list[tuple[ScrapedModel, str]]) -> None:
        """Per model: ``_count``, ``_sum``, then one line per quantile (prometheus-cpp's
        order); a quantile over an empty window is NaN."""
        quantiles = [q for q, _ in self._latency.quantiles]
        shown = [format_number(q) for q in quantiles]
        observers = [(m.stats.observer, labels) for m, labels in models]
        for name, text, key in _SUMMARIES:
            lines.append(f"# HELP {name} {text}")
            lines.append(f"# TYPE {name} summary")
            for observer, labels in observers:
                if not isinstance(observer, LatencyObserver):
                    continue
                summary = observer.summaries()[key]
                if summary is None:
                    continue
                lines.append(f"{name}_count{{{labels}}} {summary.count}")
                lines.append(f"{name}_sum{{{labels}}} {_decimal(summary.sum, 1000)}")
                values = summary.window.quantiles(quantiles, observer.now())
                for q, value in zip(shown, values, strict=True):
                    shown_value = "NaN" if math.isnan(value) else _decimal(int(value), 1000)
                    lines.append(f'{name}{{{labels},quantile="{q}"}} {shown_value}')
