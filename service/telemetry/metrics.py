"""Prometheus metrics in Triton's names, read from the ``ModelStats`` objects at scrape time.

No counter of its own: every value is computed from the same objects ModelStatistics
encodes, when Prometheus asks, so the two always agree and requests pay nothing extra.
The text is Prometheus exposition format 0.0.4, written here because prometheus_client
renames counters to ``<name>_total`` while Triton's dashboards query the bare names.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from ..statistics import ModelStats

__all__ = ["CONTENT_TYPE", "MetricsRenderer", "ScrapedModel"]

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
        "nv_inference_request_failure",
        "counter",
        "Number of failed inference requests, all batch sizes",
        lambda m: m.stats.fail.count,
    ),
    _Family(
        "nv_inference_request_cancelled",
        "counter",
        "Number of inference requests whose caller went away before execution "
        "(not a Triton metric)",
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


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


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
    ) -> None:
        self._source = source
        self._families = _INFERENCE + (_CACHE if cache_enabled else ())
        self._extra = extra

    def render(self) -> bytes:
        models = [(m, f'model="{_label(m.name)}",version="{m.version}"') for m in self._source()]
        lines: list[str] = []
        for family in self._families:
            lines.append(f"# HELP {family.name} {family.help}")
            lines.append(f"# TYPE {family.name} {family.type}")
            lines.extend(f"{family.name}{{{labels}}} {family.value(m)}" for m, labels in models)
        text = "\n".join(lines) + "\n"
        if self._extra is not None:
            text += self._extra()
        return text.encode()
