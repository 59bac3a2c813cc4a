"""The default scheduler: each request goes to the next free instance, unbatched.

The model's instance threads share one queue (``InstancePool.share_inbox``): a request is
put there at once and the first thread to be free runs it, so the loop does no step of its
own between two executions. Results come back through the loop's mailbox. A model whose
executions are known to be short runs on the loop's own thread instead, with no hand-off
at all (``inline``, decision 067).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

from ..backends.base import ModelInstance, RequestInstance
from ..errors import Unavailable
from ..statistics import BatchTimings, ModelStats
from .abandoned import caller_left
from .base import Enqueuing, ExecutionResult, Job
from .batch import JobOutputs, execute_batch
from .batch_io import BatchIO
from .delivery import outcome_of, settle
from .inflight import InFlight
from .inline import (
    BOUND_NS,
    InlineGate,
    LoopTurn,
    inline_capable,
    size_free,
    small_inputs,
    turn_of,
)
from .instances import InstancePool

__all__ = ["DefaultScheduler"]

Outcome = tuple[list[JobOutputs], BatchTimings] | None  # None: skipped, its caller had left


class DefaultScheduler(Enqueuing):
    def __init__(
        self,
        pool: InstancePool,
        stats: ModelStats,
        clock: Callable[[], int] = time.monotonic_ns,
        io: BatchIO | None = None,
        name: str = "",
    ) -> None:
        """``name``: the model's, for the log."""
        self._pool = pool
        self._io = io  # the model's ragged inputs, batch inputs and outputs
        self._stats = stats
        self._clock = clock
        self._inflight = InFlight()
        self._stopping = False
        # Whether a job was taken by a thread or dropped by its leaving caller is decided
        # under this lock, so a cancelled request is counted exactly once, at once.
        self._claims = threading.Lock()
        pool.share_inbox()
        #: Decides when requests run on the loop's thread; None: never (decision 067).
        self.inline: InlineGate | None = InlineGate(name) if inline_capable(pool) else None
        self._size_free = size_free(pool)  # inputs of any size may run on the loop
        self._turn: LoopTurn | None = None  # the loop's, bound at the first request

    @property
    def inflight(self) -> int:
        return self._inflight.count

    def enqueue(self, job: Job) -> asyncio.Future[ExecutionResult]:
        """Queue ``job``; its future gets the outcome (``submit`` without a task: a
        caller that stops waiting calls ``abandon``)."""
        if self._stopping:
            raise Unavailable("model is unloading: new requests are refused")
        future: asyncio.Future[ExecutionResult] = self._pool.mailbox().loop.create_future()
        job.future = future
        job.enqueue_ns = self._clock()
        self._inflight.enter()
        gate = self.inline
        if (
            gate is not None
            and gate.open
            and job.sink is None
            and (self._size_free or small_inputs(job.inputs))
        ):
            turn = self._turn
            if turn is None:
                turn = self._turn = turn_of(future.get_loop())
            if turn.spent < BOUND_NS:
                worker = self._pool.inline_worker()
                if worker is not None:
                    turn.add(self._run_inline(job, worker.instance, gate, worker.turn.release))
                    return future
        self._pool.submit(lambda instance: self._execute(job, instance), self._deliver(job))
        return future

    def _run_inline(
        self,
        job: Job,
        instance: ModelInstance | RequestInstance,
        gate: InlineGate,
        release: Callable[[], None],
    ) -> int:
        """Execute ``job`` here, on the loop's thread, holding the instance's turn; its
        caller's future is settled before ``enqueue`` returns (statistics, errors and
        counts as from a thread: the same ``_finish``). Returns the time it took (ns)."""
        job.started = True  # no thread ever sees it; its caller cannot have left yet
        start = time.monotonic_ns()  # the loop's own time, as execute_batch's stamps
        try:
            outcome: Outcome = execute_batch(instance, (job,), io=self._io)
            error: BaseException | None = None
        except Exception as exc:  # the caller's, as from a thread
            outcome, error = None, exc
        finally:
            release()
        span = time.monotonic_ns() - start
        gate.on_loop(span)
        self._finish(job, outcome, error)
        return span

    def abandon(self, job: Job) -> None:
        """The caller of ``job`` stopped waiting: dropped if no thread took it yet,
        counted where it ends otherwise (``abandoned.caller_left``)."""
        caller_left(self._stats, self._claims, self._inflight, job, self._clock())

    def _execute(self, job: Job, instance: ModelInstance | RequestInstance) -> Outcome:
        """In an instance thread."""
        with self._claims:
            if job.started:
                return None
            job.started = True
        return execute_batch(instance, (job,), io=self._io)

    def _deliver(self, job: Job) -> Callable[[Any, BaseException | None], None]:
        gate = self.inline

        def deliver(outcome: Outcome, error: BaseException | None) -> None:
            if gate is not None and outcome is not None and not gate.open:
                timings = outcome[1]
                gate.on_thread(timings.end - timings.start)
            self._finish(job, outcome, error)

        return deliver

    def _finish(self, job: Job, outcome: Outcome, error: BaseException | None) -> None:
        """On the loop: the job's outcome to its caller, its execution to the statistics."""
        if error is not None:
            if settle(self._stats, job, error, self._clock):
                self._inflight.leave()
            return
        if outcome is None:  # skipped: its leaving caller counted it
            return
        outputs, timings = outcome
        self._stats.record_execution(job.size, timings)
        if settle(self._stats, job, outcome_of(job, outputs[0], timings), self._clock):
            self._inflight.leave()

    async def stop(self) -> None:
        """Refuse new jobs, let accepted ones finish, then free the instances."""
        self._stopping = True
        await self._inflight.drained()
        await self._pool.aclose()
