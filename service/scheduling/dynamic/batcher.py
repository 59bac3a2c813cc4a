"""The dynamic batcher: one asyncio task per model drives the pure queue and batch rules.

The task wakes on a new job, a freed instance or a timer; it forms a batch only when an
instance is free, so that under load requests keep joining until one can run. Callers
wait on a per-job future. A caller that goes away (cancellation, deadline) leaves a
cancelled future behind, and the job is dropped before it is executed.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable

from inference import model_config_pb2 as mc

from ...errors import Unavailable
from ...statistics import BatchTimings, ModelStats
from ..abandoned import count_if_delivered_too_late
from ..base import Enqueuing, ExecutionResult, Job
from ..batch import JobOutputs, batch_steps
from ..batch_io import BatchIO
from ..delivery import batch_failure, outcome_of, settle
from ..hooks import DELAY_ENV, Driver, hold_count
from ..instances import InstancePool, InstanceWorker
from .policy import BatchPolicy
from .queues import PriorityQueues

__all__ = ["DynamicBatchScheduler"]

log = logging.getLogger(__name__)

Clock = Callable[[], int]


class DynamicBatchScheduler(Enqueuing):
    def __init__(
        self,
        config: mc.ModelConfig,
        pool: InstancePool,
        stats: ModelStats,
        clock: Clock = time.monotonic_ns,
        delay_count: int | None = None,
    ) -> None:
        self._name = config.name
        self._pool = pool
        self._stats = stats
        self._clock = clock
        self._io = BatchIO.of(config)
        self._policy = BatchPolicy.from_config(config, ragged_inputs(config))
        self._queues = PriorityQueues.from_config(config.dynamic_batching)
        self._preserve_ordering = config.dynamic_batching.preserve_ordering
        self._delay_count = hold_count(DELAY_ENV) if delay_count is None else delay_count
        self._driver = Driver(f"batcher-{config.name}", self._step)
        self._executing = 0  # batches handed to an instance and not finished
        self._inflight = 0
        self._seq = 0
        self._next_release = 0
        self._held: dict[int, Callable[[], None]] = {}
        self._stopping = False
        pool.on_release(self._released)

    @property
    def inflight(self) -> int:
        return self._inflight

    def enqueue(self, job: Job) -> asyncio.Future[ExecutionResult]:
        """Queue ``job``; its future gets the outcome (``submit`` without a task: a
        caller that stops waiting calls ``abandon``)."""
        if self._stopping:
            raise Unavailable(f"model '{self._name}' is unloading: new requests are refused")
        job.enqueue_ns = self._clock()
        self._queues.push(job, job.enqueue_ns)  # may refuse: queue full
        future: asyncio.Future[ExecutionResult] = self._pool.mailbox().loop.create_future()
        job.future = future
        self._inflight += 1
        self._driver.wake()
        return future

    def abandon(self, job: Job) -> None:
        """The caller of ``job`` stopped waiting: a queued job is dropped at the next
        step (now), one delivered but not yet read is counted here."""
        future = job.future
        assert future is not None
        if future.cancel() or future.cancelled():  # not settled: it leaves the count here
            self._inflight -= 1
        self._driver.wake()  # drop it from the queue now, not at the next event
        count_if_delivered_too_late(self._stats, job, future, self._clock())

    def _released(self) -> None:
        """A freed instance matters only to queued jobs: with none, no step is needed."""
        if len(self._queues):
            self._driver.wake()

    def _step(self) -> None:
        """One pass of the batching rules; forms as many batches as free instances allow."""
        now = self._clock()
        queues = self._queues
        for job in queues.drop_done():
            self._stats.record_cancelled(now - job.enqueue_ns, job.size)
        if self._delay_count:  # Triton's test hook: nothing at all happens until N queued
            if len(queues) < self._delay_count:
                return
            self._delay_count = 0
        if queues.has_timeouts:
            self._reject(queues.reject_expired(now))
        wait_until = None
        while len(queues) and self._pool.has_free:
            decision = self._policy.decide(queues.scan(now), now)
            if queues.has_timeouts:
                self._reject(queues.take_rejected())
            if not decision.take:
                wait_until = decision.wait_until_ns
                break
            worker = self._pool.try_acquire()
            assert worker is not None
            self._dispatch(worker, queues.pop(decision.take))
        if queues.has_timeouts:
            expiry = queues.next_expiry_ns()
            if expiry is not None and (wait_until is None or expiry < wait_until):
                wait_until = expiry
        self._driver.arm(wait_until, now)

    def _reject(self, jobs: list[Job]) -> None:
        """Timed-out requests fail at once, outside any preserve_ordering (as in Triton)."""
        for job in jobs:
            self._settle(job, Unavailable("Request timeout expired", failure="REJECTED"))

    def _dispatch(self, worker: InstanceWorker, jobs: list[Job]) -> None:
        """Straight to the instance's thread: no task in between (see instances.py)."""
        if self._preserve_ordering:  # responses leave in the order requests leave the queue
            for job in jobs:
                job.seq = self._seq
                self._seq += 1
        self._executing += 1
        io = self._io
        self._pool.dispatch(
            worker,
            lambda instance: batch_steps(instance, jobs, io=io),
            lambda outcome, error: self._finished(jobs, outcome, error),
            steps=True,
        )

    def _finished(
        self,
        jobs: list[Job],
        outcome: tuple[list[JobOutputs], BatchTimings] | None,
        error: BaseException | None,
    ) -> None:
        self._executing -= 1
        if outcome is None:
            failure = batch_failure(error)
            for job in jobs:
                self._complete(job, functools.partial(self._settle, job, failure))
            return
        outputs, timings = outcome
        self._stats.record_execution(sum(j.size for j in jobs), timings)
        if not self._preserve_ordering:  # the common case: deliver now, no partials
            for job, out in zip(jobs, outputs, strict=True):
                if settle(self._stats, job, outcome_of(job, out, timings), self._clock):
                    self._inflight -= 1
            return
        for job, out in zip(jobs, outputs, strict=True):
            self._complete(job, functools.partial(self._settle, job, outcome_of(job, out, timings)))

    def _settle(self, job: Job, outcome: ExecutionResult | BaseException) -> None:
        if settle(self._stats, job, outcome, self._clock):
            self._inflight -= 1

    def _complete(self, job: Job, deliver: Callable[[], None]) -> None:
        """Deliver now, or, with preserve_ordering, once every earlier job is delivered."""
        if not self._preserve_ordering:
            deliver()
            return
        self._held[job.seq] = deliver
        while self._next_release in self._held:
            self._held.pop(self._next_release)()
            self._next_release += 1

    async def stop(self) -> None:
        """Finish queued and executing jobs, then stop the batcher and free the instances."""
        self._stopping = True
        while len(self._queues) or self._executing:
            self._driver.wake()
            await asyncio.sleep(0.01)
        self._driver.close()
        await self._pool.aclose()


def ragged_inputs(config: mc.ModelConfig) -> frozenset[str]:
    """Inputs whose shapes may differ within a batch: ``allow_ragged_batch`` ones. Request
    backends take each request's own; a tensor backend gets them flat (``BatchIO``)."""
    return frozenset(i.name for i in config.input if i.allow_ragged_batch)
