"""The default scheduler: each request goes to the next free instance, unbatched."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from ..errors import ServerError, Unavailable
from ..statistics import BatchTimings, ModelStats
from .abandoned import count_abandoned
from .base import ExecutionResult, Job
from .batch import JobOutputs
from .inflight import InFlight
from .instances import InstancePool

__all__ = ["DefaultScheduler"]


class DefaultScheduler:
    def __init__(
        self, pool: InstancePool, stats: ModelStats, clock: Callable[[], int] = time.monotonic_ns
    ) -> None:
        self._pool = pool
        self._stats = stats
        self._clock = clock
        self._inflight = InFlight()
        self._stopping = False

    @property
    def inflight(self) -> int:
        return self._inflight.count

    async def submit(self, job: Job) -> ExecutionResult:
        if self._stopping:
            raise Unavailable("model is unloading: new requests are refused")
        with self._inflight:
            job.enqueue_ns = self._clock()
            try:
                worker = await self._pool.acquire()
            except asyncio.CancelledError:
                self._stats.record_cancelled(self._clock() - job.enqueue_ns)
                raise
            task = self._pool.launch_jobs(worker, [job])
            task.add_done_callback(lambda t: self._record(job, t))
            try:
                outputs, timings = await asyncio.shield(task)
            except asyncio.CancelledError:  # the caller left; the execution runs on
                if task.done():
                    self._count_abandoned(job, task)
                else:
                    task.add_done_callback(lambda t: self._count_abandoned(job, t))
                raise
            if isinstance(outputs[0], ServerError):
                raise outputs[0]
            return ExecutionResult(outputs[0], timings.start - job.enqueue_ns, timings)

    def _record(
        self, job: Job, task: asyncio.Future[tuple[list[JobOutputs], BatchTimings]]
    ) -> None:
        if not task.cancelled() and task.exception() is None:
            self._stats.record_execution(job.size, task.result()[1])

    def _count_abandoned(
        self, job: Job, task: asyncio.Future[tuple[list[JobOutputs], BatchTimings]]
    ) -> None:
        outcome: ExecutionResult | BaseException
        if task.cancelled():
            outcome = Unavailable("execution cancelled")
        elif task.exception() is not None:
            outcome = task.exception()  # type: ignore[assignment]
        else:
            outputs, timings = task.result()
            out = outputs[0]
            outcome = (
                out
                if isinstance(out, ServerError)
                else ExecutionResult(out, timings.start - job.enqueue_ns, timings)
            )
        count_abandoned(self._stats, job, outcome, self._clock())

    async def stop(self) -> None:
        """Refuse new jobs, let accepted ones finish, then free the instances."""
        self._stopping = True
        await self._inflight.drained()
        await self._pool.aclose()
