"""Dynamic batching formed by the instance threads themselves, for the plainest configs.

With no preferred sizes, no queue delay, one priority level, no timeouts or queue bound,
no preserve_ordering and no ragged inputs, Triton's rule reduces to: when an instance is
free, it takes the queued requests in order while they fit ``max_batch_size`` and share
their shapes. Here the free instance's thread applies that rule itself: each request is
queued with a token in the instances' shared queue, and the thread that takes a token
drains what is pending into one batch (tokens that find nothing left cost a lock). The
loop does no batching step and the thread does not wait for one: a busy loop otherwise
leaves the thread asleep between batches and then waiting for the GIL, which cost more
than batching saved (docs/decisions/022-lean-request-path.md). Every other config goes
to ``DynamicBatchScheduler``.

A model whose executions are known to be short (``inline.InlineGate``, decision 067)
drains on the loop's own thread instead (decision 075): the requests that arrive in one
turn of the loop are queued with no token, and one callback at the end of that turn
drains them, by the same rule, into a batch executed there, with no queue put, thread
wake-up, GIL hand-off or mailbox post. When the instance is busy on a thread, work is
queued for the threads, or the turn has spent its bound, they get their tokens instead.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import cast

from inference import model_config_pb2 as mc

from ...errors import Unavailable
from ...statistics import BatchTimings, ModelStats
from ..abandoned import caller_left
from ..base import Enqueuing, ExecutionResult, Job
from ..batch import JobOutputs, execute_batch
from ..batch_io import BatchIO
from ..delivery import batch_failure, outcome_of, settle
from ..inflight import InFlight
from ..inline import BOUND_NS, InlineGate, LoopTurn, inline_capable, small_inputs, turn_of
from ..instances import SKIP, Instance, InstancePool

__all__ = ["DrainBatchScheduler", "drains"]

Clock = Callable[[], int]
Outcome = tuple[list[Job], tuple[list[JobOutputs], BatchTimings] | None, BaseException | None]


def drains(config: mc.ModelConfig, ragged: bool, hold: int) -> bool:
    """Whether ``config``'s dynamic batching is the plain rule this scheduler applies
    (``hold``: Triton's TRITONSERVER_DELAY_SCHEDULER count, a test hook)."""
    batching = config.dynamic_batching
    policy = batching.default_queue_policy
    # The config's normalisation makes max_batch_size the one preferred size when none
    # is given; then "fits max_batch_size" is the whole rule.
    preferred = set(batching.preferred_batch_size) - {max(config.max_batch_size, 1)}
    return not (
        preferred
        or batching.max_queue_delay_microseconds
        or batching.preserve_ordering
        or batching.priority_levels
        or batching.priority_queue_policy
        or policy.default_timeout_microseconds
        or policy.allow_timeout_override
        or policy.max_queue_size
        or ragged
        or hold
    )


class DrainBatchScheduler(Enqueuing):
    def __init__(
        self,
        config: mc.ModelConfig,
        pool: InstancePool,
        stats: ModelStats,
        clock: Clock = time.monotonic_ns,
    ) -> None:
        self._name = config.name
        self._pool = pool
        self._stats = stats
        self._clock = clock
        self._limit = max(config.max_batch_size, 1)
        self._io = BatchIO.of(config)  # batch inputs / outputs (never ragged ones here)
        self._pending: deque[Job] = deque()
        # Whether a thread took a job or its leaving caller dropped it is decided under
        # this lock; the threads also drain ``_pending`` under it.
        self._claims = threading.Lock()
        self._inflight = InFlight()
        self._stopping = False
        pool.share_inbox()
        #: Decides when batches run on the loop's thread; None: never (decision 075).
        self.inline: InlineGate | None = InlineGate(config.name) if inline_capable(pool) else None
        self._turn: LoopTurn | None = None  # the loop's, bound at the first request
        # Jobs queued in this turn for ``_drain_here`` at its end, with no token yet.
        self._deferred = 0

    @property
    def inflight(self) -> int:
        return self._inflight.count

    def enqueue(self, job: Job) -> asyncio.Future[ExecutionResult]:
        """Queue ``job``; its future gets the outcome (``submit`` without a task: a
        caller that stops waiting calls ``abandon``)."""
        if self._stopping:
            raise Unavailable(f"model '{self._name}' is unloading: new requests are refused")
        future: asyncio.Future[ExecutionResult] = self._pool.mailbox().loop.create_future()
        job.future = future
        job.enqueue_ns = self._clock()
        self._inflight.enter()
        with self._claims:
            self._pending.append(job)
        gate = self.inline
        if gate is not None and gate.open and job.sink is None and small_inputs(job.inputs):
            if not self._deferred:  # after the turn's other callbacks (its frame's requests)
                future.get_loop().call_soon(self._drain_here)
            self._deferred += 1
            return future
        self._pool.submit(self._drain, self._on_thread)
        return future

    def _drain_here(self) -> None:
        """At the end of the turn that queued them: the deferred jobs drained and executed
        on the loop's thread, if its instance is free, nothing is queued for the threads
        and the turn has time left; what that batch leaves, or all, get their tokens."""
        deferred, self._deferred = self._deferred, 0
        gate = self.inline
        assert gate is not None
        turn = self._turn
        if turn is None:
            turn = self._turn = turn_of(self._pool.mailbox().loop)
        worker = None
        if gate.open and turn.spent < BOUND_NS:
            worker = self._pool.inline_worker()
        taken = 0
        if worker is not None:
            start = time.monotonic_ns()  # the loop's own time, as execute_batch's stamps
            try:
                drained = self._drain(worker.instance)
            finally:
                worker.turn.release()
            if drained is not SKIP:  # SKIP: the threads took them, or their callers left
                span = time.monotonic_ns() - start
                gate.on_loop(span)
                turn.add(span)
                outcome = cast(Outcome, drained)
                taken = len(outcome[0])
                self._finished(outcome, None)
        for _ in range(deferred - taken):  # each drain takes one job at least
            self._pool.submit(self._drain, self._on_thread)

    def abandon(self, job: Job) -> None:
        """The caller of ``job`` stopped waiting (``abandoned.caller_left``)."""
        caller_left(self._stats, self._claims, self._inflight, job, self._clock())

    def _drain(self, instance: Instance) -> Outcome | object:
        """In an instance thread: the pending jobs, in order, while they fit and agree."""
        jobs: list[Job] = []
        with self._claims:
            pending = self._pending
            total = 0
            key = None
            while pending:
                job = pending[0]
                if job.started:  # its caller left
                    pending.popleft()
                    continue
                size = job.size
                if jobs and (total + size > self._limit or job.shape_key() != key):
                    break
                pending.popleft()
                job.started = True
                jobs.append(job)
                total += size
                if key is None:
                    key = job.shape_key()
        if not jobs:
            return SKIP
        try:
            return jobs, execute_batch(instance, jobs, io=self._io), None
        except BaseException as exc:  # the batch's callers get it
            return jobs, None, exc

    def _on_thread(self, outcome: Outcome, error: BaseException | None) -> None:
        """A thread's drain, on the loop: its span measured for the gate, then finished."""
        gate = self.inline
        if gate is not None and not gate.open:
            done = outcome[1]
            if done is not None:
                timings = done[1]
                gate.on_thread(timings.end - timings.start)
        self._finished(outcome, error)

    def _finished(self, outcome: Outcome, error: BaseException | None) -> None:
        assert outcome is not None, error  # _drain itself does not raise
        jobs, done, failed = outcome
        if done is None:
            failure = batch_failure(failed)
            for job in jobs:
                if settle(self._stats, job, failure, self._clock):
                    self._inflight.leave()
            return
        outputs, timings = done
        self._stats.record_execution(sum(j.size for j in jobs), timings)
        for job, out in zip(jobs, outputs, strict=True):
            if settle(self._stats, job, outcome_of(job, out, timings), self._clock):
                self._inflight.leave()

    async def stop(self) -> None:
        """Refuse new jobs, let accepted ones finish, then free the instances."""
        self._stopping = True
        await self._inflight.drained()
        await self._pool.aclose()
