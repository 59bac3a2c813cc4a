"""Per model-version statistics, as the statistics extension defines them.

Every update happens on the event loop thread (workers hand their timings back through
the awaited result), so plain integers are enough and no increment is ever lost.
Durations are nanoseconds, as the protocol reports them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

__all__ = [
    "FAILURE_REASONS",
    "BatchTimings",
    "Duration",
    "ModelStats",
    "RequestSizeStats",
    "StatsObserver",
    "set_observer_factory",
]

# Triton 2.51's failure reasons (core infer_stats.h), in its order: the ``reason`` label of
# ``nv_inference_request_failure``. REJECTED: timed out in a queue; CANCELED: cancelled
# while pending; BACKEND: the model failed it; OTHER: the rest (an ensemble's failures).
FAILURE_REASONS = ("REJECTED", "CANCELED", "BACKEND", "OTHER")


@dataclass(slots=True)
class Duration:
    count: int = 0
    ns: int = 0

    def add(self, ns: int) -> None:
        self.count += 1
        self.ns += ns


@dataclass(slots=True)
class BatchTimings:
    """Monotonic timestamps (ns) of one execution, taken in the instance's thread. Not
    frozen, though never changed: a frozen dataclass's ``__init__`` sets each field
    through ``object.__setattr__``, three times the cost, once per execution on the
    loop's thread (decision 072)."""

    start: int  # dispatch: queueing ends here
    input_end: int  # inputs merged and handed to the backend
    infer_end: int  # backend returned
    end: int  # outputs split per request

    @property
    def compute_input(self) -> int:
        return self.input_end - self.start

    @property
    def compute_infer(self) -> int:
        return self.infer_end - self.input_end

    @property
    def compute_output(self) -> int:
        return self.end - self.infer_end


@dataclass(slots=True)
class ResponseStats:
    """Per response index (0 for models that send one response per request)."""

    compute_infer: Duration = field(default_factory=Duration)
    compute_output: Duration = field(default_factory=Duration)
    success: Duration = field(default_factory=Duration)
    fail: Duration = field(default_factory=Duration)
    empty_response: Duration = field(default_factory=Duration)
    cancel: Duration = field(default_factory=Duration)


@dataclass(slots=True)
class BatchStats:
    compute_input: Duration = field(default_factory=Duration)
    compute_infer: Duration = field(default_factory=Duration)
    compute_output: Duration = field(default_factory=Duration)


@dataclass(slots=True)
class RequestSizeStats:
    """The requests of one batch size (rows per request; 1 where the model does not batch),
    as Triton 1.x's status reported them (``InferRequestStats`` in ``infer_stats``, keyed by
    the request's batch size): served by the legacy v1 API. ``compute``: the execution the
    request was part of, from dispatch to its outputs split."""

    success: Duration = field(default_factory=Duration)
    fail: Duration = field(default_factory=Duration)
    queue: Duration = field(default_factory=Duration)
    compute: Duration = field(default_factory=Duration)


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


class StatsObserver(Protocol):
    """Sees each per-request observation as ``ModelStats`` records it.

    For what counters cannot give: latency summaries (quantiles over a time window) and
    histograms need every value, not only the sums. Called on the event loop thread.
    """

    def observe_request(
        self, request_ns: int, queue_ns: int | None, timings: BatchTimings | None
    ) -> None:
        """A successful request; ``queue_ns`` / ``timings`` are None where not recorded."""

    def observe_response(self, index: int, elapsed_ns: int) -> None:
        """A decoupled model's response ``index`` (not cancelled), ``elapsed_ns`` after
        the previous one (for index 0: after the request was handed to the model)."""


_observer_factory: Callable[[], StatsObserver] | None = None


def set_observer_factory(factory: Callable[[], StatsObserver] | None) -> None:
    """Give every ``ModelStats`` created from now on an observer (None: none).

    Process-wide because the core builds ``ModelStats`` itself; the composition root sets
    it once, before models load. Without one, recording pays a single ``is None`` test.
    """
    global _observer_factory
    _observer_factory = factory


def _new_observer() -> StatsObserver | None:
    return _observer_factory() if _observer_factory is not None else None


@dataclass
class ModelStats:
    """Counters for one model version; ``wall_ms`` is injectable for tests."""

    success: Duration = field(default_factory=Duration)
    fail: Duration = field(default_factory=Duration)
    queue: Duration = field(default_factory=Duration)
    compute_input: Duration = field(default_factory=Duration)
    compute_infer: Duration = field(default_factory=Duration)
    compute_output: Duration = field(default_factory=Duration)
    inference_count: int = 0
    execution_count: int = 0
    last_inference_ms: int = 0
    cancelled: int = 0
    failures: dict[str, int] = field(default_factory=lambda: dict.fromkeys(FAILURE_REASONS, 0))
    cache_hit: Duration = field(default_factory=Duration)
    cache_miss: Duration = field(default_factory=Duration)
    batches: dict[int, BatchStats] = field(default_factory=dict)
    # by the request's batch size (0: a failure whose size nobody knew), beside the totals
    request_sizes: dict[int, RequestSizeStats] = field(default_factory=dict)
    responses: dict[int, ResponseStats] = field(default_factory=dict)
    memory_bytes: int = 0  # CPU memory the loaded instances took (estimate, see loader)
    gpu_memory_bytes: dict[int, int] = field(default_factory=dict)  # CUDA ordinal -> bytes
    wall_ms: Callable[[], int] = _wall_ms
    observer: StatsObserver | None = field(default_factory=_new_observer, repr=False, compare=False)

    def record_execution(self, batch_size: int, timings: BatchTimings) -> None:
        """One model execution of ``batch_size`` inferences (1 for unbatched models). As
        in Triton's core, the inference count grows with each request that succeeds
        (``record_success``), not here: a failed execution counts as an execution only."""
        self.execution_count += 1
        stats = self.batches.get(batch_size)
        if stats is None:
            stats = self.batches[batch_size] = BatchStats()
        d = stats.compute_input
        d.count += 1
        d.ns += timings.input_end - timings.start
        d = stats.compute_infer
        d.count += 1
        d.ns += timings.infer_end - timings.input_end
        d = stats.compute_output
        d.count += 1
        d.ns += timings.end - timings.infer_end

    def record_success(
        self, request_ns: int, queue_ns: int, timings: BatchTimings, inferences: int = 1
    ) -> None:
        """One request that succeeded, of ``inferences`` rows (its batch size, at least
        one): Triton's UpdateSuccess, which is where the inference count grows."""
        # Once per request: plain adds, no call per counter.
        self.inference_count += inferences
        infer = timings.infer_end - timings.input_end
        output = timings.end - timings.infer_end
        d = self.success
        d.count += 1
        d.ns += request_ns
        d = self.queue
        d.count += 1
        d.ns += queue_ns
        d = self.compute_input
        d.count += 1
        d.ns += timings.input_end - timings.start
        d = self.compute_infer
        d.count += 1
        d.ns += infer
        d = self.compute_output
        d.count += 1
        d.ns += output
        by_size = self.request_sizes.get(inferences) or self._request_size(inferences)
        d = by_size.success
        d.count += 1
        d.ns += request_ns
        d = by_size.queue
        d.count += 1
        d.ns += queue_ns
        d = by_size.compute
        d.count += 1
        d.ns += timings.end - timings.start
        response = self.responses.get(0) or self._response(0)
        d = response.compute_infer
        d.count += 1
        d.ns += infer
        d = response.compute_output
        d.count += 1
        d.ns += output
        d = response.success
        d.count += 1
        d.ns += infer + output
        self.last_inference_ms = self.wall_ms()
        if self.observer is not None:
            self.observer.observe_request(request_ns, queue_ns, timings)

    def record_request_success(
        self,
        request_ns: int,
        queue_ns: int | None = None,
        timings: BatchTimings | None = None,
        inferences: int = 1,
    ) -> None:
        """A decoupled request whose responses all went out. Its queue and compute times
        (the ``execute`` call, as Triton backends report them) count like any request's,
        so tools that profile from these counters (perf_analyzer) work; its responses
        are counted per index by ``record_response``."""
        self.inference_count += inferences
        self.success.add(request_ns)
        by_size = self._request_size(inferences)
        by_size.success.add(request_ns)
        if queue_ns is not None and timings is not None:
            self.queue.add(queue_ns)
            self.compute_input.add(timings.compute_input)
            self.compute_infer.add(timings.compute_infer)
            self.compute_output.add(timings.compute_output)
            by_size.queue.add(queue_ns)
            by_size.compute.add(timings.end - timings.start)
        self.last_inference_ms = self.wall_ms()
        if self.observer is not None:
            self.observer.observe_request(request_ns, queue_ns, timings)

    def record_cache_hit(self, request_ns: int, lookup_ns: int, inferences: int = 1) -> None:
        """Hits count as successes and (zero-length) queue entries, never as executions."""
        self.success.add(request_ns)
        self.queue.add(0)
        by_size = self._request_size(inferences)
        by_size.success.add(request_ns)
        by_size.queue.add(0)
        self.cache_hit.add(lookup_ns)
        self.last_inference_ms = self.wall_ms()
        if self.observer is not None:
            self.observer.observe_request(request_ns, 0, None)

    def record_cache_miss(self, lookup_and_insert_ns: int) -> None:
        self.cache_miss.add(lookup_and_insert_ns)

    def record_backend_failure(self) -> None:
        """The model ran and failed: its response (index 0) is a failed one."""
        self._response(0).fail.add(0)

    def record_response(
        self,
        index: int,
        infer_ns: int,
        output_ns: int,
        *,
        ok: bool,
        empty: bool = False,
        cancelled: bool = False,
    ) -> None:
        """One response of a decoupled model, at its index in the request's stream."""
        stats = self._response(index)
        if cancelled:
            stats.cancel.add(0)
        elif empty:
            stats.empty_response.add(infer_ns)
        elif ok:
            stats.compute_infer.add(infer_ns)
            stats.compute_output.add(output_ns)
            stats.success.add(infer_ns + output_ns)
        else:
            stats.fail.add(infer_ns)
        if self.observer is not None and not cancelled:
            self.observer.observe_response(index, infer_ns + output_ns)

    def _response(self, index: int) -> ResponseStats:
        stats = self.responses.get(index)
        if stats is None:
            stats = self.responses[index] = ResponseStats()
        return stats

    def _request_size(self, inferences: int) -> RequestSizeStats:
        stats = self.request_sizes.get(inferences)
        if stats is None:
            stats = self.request_sizes[inferences] = RequestSizeStats()
        return stats

    def record_failure(self, request_ns: int, reason: str = "OTHER", inferences: int = 0) -> None:
        """A request the model accepted and did not answer; every failure has one reason.
        ``inferences``: its batch size (0: not known, as Triton 1.x kept such failures)."""
        self.fail.add(request_ns)
        self._request_size(inferences).fail.add(request_ns)
        self.failures[reason] += 1
        self.last_inference_ms = self.wall_ms()

    def record_cancelled(self, request_ns: int = 0, inferences: int = 0) -> None:
        """A request removed before execution because its caller went away (cancelled, or
        its deadline passed): a failure with reason CANCELED, as Triton counts it, and our
        own cancelled count."""
        self.record_failure(request_ns, "CANCELED", inferences)
        self.cancelled += 1

    def record_caller_gone(self) -> None:
        """A request that ran after its caller went away (already counted as a success or
        a failure when the backend finished): our own cancelled count."""
        self.cancelled += 1
