"""Latency summaries and histograms, fed one request at a time through ``StatsObserver``.

Counters are read from ``ModelStats`` totals at scrape time (metrics.py); quantiles and
buckets need every value, so when ``--metrics-config summary_latencies`` or
``histogram_latencies`` is on, each ``ModelStats`` gets a ``LatencyObserver`` and its
``record_*`` calls hand it the same numbers ModelStatistics adds up. Off, nothing here
runs. Everything runs on the event loop thread (records and scrapes), so no locks.

Sliding window: like prometheus-cpp (Triton's library), the window is ``age_buckets``
time slices covering ``max_age`` (60 s, 5 slices); a quantile reflects the values of the
last 48-60 s. Each slice keeps up to ``capacity`` values exactly, then a uniform reservoir
sample with a weight (values seen / values kept), so memory is bounded
(``age_buckets * capacity`` integers per summary) and slices of different rates still
merge without bias. Quantiles are exact ranks over what is kept: exact while no slice has
overflowed (about 85 requests per second per model with the defaults), the quantiles of
a uniform sample beyond. Values are kept in nanoseconds and printed as exact decimals.
"""

from __future__ import annotations

import bisect
import math
import random
import time
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..statistics import BatchTimings
from .metrics_config import (
    FIRST_RESPONSE_BUCKETS_MS,
    SUMMARY_AGE_BUCKETS,
    SUMMARY_MAX_AGE_S,
    LatencyMetrics,
)

__all__ = ["Histogram", "LatencyObserver", "SlidingQuantiles", "Summary"]

#: Values a slice keeps before it samples (8 bytes each).
DEFAULT_CAPACITY = 1024


@dataclass(slots=True)
class _Slice:
    epoch: int = -1  # which max_age/age_buckets interval the values belong to
    seen: int = 0
    values: array[int] | None = None


class SlidingQuantiles:
    """Quantiles of the values observed during the last ``max_age_s`` seconds (see above)."""

    def __init__(
        self,
        max_age_s: float = SUMMARY_MAX_AGE_S,
        age_buckets: int = SUMMARY_AGE_BUCKETS,
        capacity: int = DEFAULT_CAPACITY,
        rng: random.Random | None = None,
    ) -> None:
        if max_age_s <= 0 or age_buckets < 1 or capacity < 1:
            raise ValueError("max_age_s, age_buckets and capacity must be positive")
        self._width = max_age_s / age_buckets
        self._capacity = capacity
        self._slices = [_Slice() for _ in range(age_buckets)]
        self._rng = rng or random.Random()

    def _epoch(self, now: float) -> int:
        return math.floor(now / self._width)

    def add(self, value: int, now: float) -> None:
        epoch = self._epoch(now)
        piece = self._slices[epoch % len(self._slices)]
        if piece.epoch != epoch:  # the slot's interval has aged out: reuse it
            piece.epoch, piece.seen, piece.values = epoch, 0, array("q")
        assert piece.values is not None
        piece.seen += 1
        if len(piece.values) < self._capacity:
            piece.values.append(value)
        else:  # reservoir sampling (Algorithm R): each value kept with capacity/seen
            slot = self._rng.randrange(piece.seen)
            if slot < self._capacity:
                piece.values[slot] = value

    def quantiles(self, qs: Sequence[float], now: float) -> list[float]:
        """The value at each quantile (nearest rank; NaN for an empty window)."""
        current = self._epoch(now)
        weighted: list[tuple[int, float]] = []
        for piece in self._slices:
            if piece.values and current - len(self._slices) < piece.epoch <= current:
                weight = piece.seen / len(piece.values)
                weighted.extend((v, weight) for v in piece.values)
        if not weighted:
            return [math.nan for _ in qs]
        weighted.sort(key=lambda pair: pair[0])
        cumulative: list[float] = []
        total = 0.0
        for _, weight in weighted:
            total += weight
            cumulative.append(total)
        out: list[float] = []
        for q in qs:
            # The smallest value with at least q of the weight at or below it.
            index = bisect.bisect_left(cumulative, q * total * (1 - 1e-12))
            out.append(weighted[min(index, len(weighted) - 1)][0])
        return out


class Summary:
    """A Prometheus summary: count and sum since start, quantiles over the window."""

    __slots__ = ("count", "sum", "window")

    def __init__(self, window: SlidingQuantiles) -> None:
        self.count = 0
        self.sum = 0
        self.window = window

    def observe(self, value: int, now: float) -> None:
        self.count += 1
        self.sum += value
        self.window.add(value, now)


class Histogram:
    """A Prometheus histogram over fixed upper bounds (same unit as the values)."""

    __slots__ = ("bounds", "count", "counts", "sum")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(sorted(bounds))
        self.counts = [0] * len(self.bounds)  # per bucket, not cumulative
        self.count = 0
        self.sum = 0

    def observe(self, value: int) -> None:
        self.count += 1
        self.sum += value
        index = bisect.bisect_left(self.bounds, value)
        if index < len(self.counts):
            self.counts[index] += 1

    def cumulative(self) -> list[int]:
        out, running = [], 0
        for count in self.counts:
            running += count
            out.append(running)
        return out


_NS_PER_MS = 1_000_000


class LatencyObserver:
    """One model version's summaries (ns, shown in µs) and first-response histogram (ns,
    bounds in ms * 1e6, shown in ms); a ``StatsObserver``."""

    __slots__ = (
        "_clock",
        "compute_infer",
        "compute_input",
        "compute_output",
        "first_response",
        "queue",
        "request",
    )

    def __init__(
        self,
        config: LatencyMetrics,
        clock: Callable[[], float] = time.monotonic,
        window: Callable[[], SlidingQuantiles] = SlidingQuantiles,
    ) -> None:
        self._clock = clock
        on = config.summaries
        self.request = Summary(window()) if on else None
        self.queue = Summary(window()) if on else None
        self.compute_input = Summary(window()) if on else None
        self.compute_infer = Summary(window()) if on else None
        self.compute_output = Summary(window()) if on else None
        self.first_response = (
            Histogram([b * _NS_PER_MS for b in FIRST_RESPONSE_BUCKETS_MS])
            if config.histograms
            else None
        )

    def summaries(self) -> dict[str, Summary | None]:
        return {
            "request": self.request,
            "queue": self.queue,
            "compute_input": self.compute_input,
            "compute_infer": self.compute_infer,
            "compute_output": self.compute_output,
        }

    def now(self) -> float:
        return self._clock()

    def observe_request(
        self, request_ns: int, queue_ns: int | None, timings: BatchTimings | None
    ) -> None:
        if self.request is None:
            return
        now = self._clock()
        self.request.observe(request_ns, now)
        if queue_ns is not None and self.queue is not None:
            self.queue.observe(queue_ns, now)
        if timings is not None:
            assert self.compute_input and self.compute_infer and self.compute_output
            self.compute_input.observe(timings.compute_input, now)
            self.compute_infer.observe(timings.compute_infer, now)
            self.compute_output.observe(timings.compute_output, now)

    def observe_response(self, index: int, elapsed_ns: int) -> None:
        if index == 0 and self.first_response is not None:
            self.first_response.observe(elapsed_ns)
