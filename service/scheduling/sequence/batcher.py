"""The sequence batcher: stateful models get every request of a sequence on one instance.

One asyncio task drives it, like the dynamic batcher. Direct: a batch holds one request
per slot of an instance (empty slots are zero rows with READY false). Oldest: a batch holds
the oldest waiting requests of that instance's candidate sequences, never two from one
sequence, closed by the dynamic batcher's rule. Control tensors and implicit state are
added in the instance's thread; the output state of request i is the input state of i+1.
An instance that holds its sequences' state itself (``StateHolder``: one in a worker
process) gets only the control tensors, with each row's sequence key; the state stays
there and the engine keeps only its shapes (``held.py``). Request backends (Python
models, built-ins) get the same tensors, one request per row (``requests.py``).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import cast

import numpy as np

from inference import model_config_pb2 as mc

from ...backends.base import (
    ModelInstance,
    RequestInstance,
    SequenceRows,
    StateHolder,
    StateShapes,
)
from ...errors import Cancelled, Internal, InvalidArgument, ServerError, Unavailable
from ...repository.normalize import SEQUENCE_IDLE_DEFAULT_US
from ...statistics import BatchTimings, ModelStats
from ..abandoned import caller_gone, count_if_delivered_too_late
from ..base import Array, ExecutionResult, Job
from ..batch import compute_bounds, takes_requests, union_outputs
from ..delivery import batch_failure, outcome_of, settle
from ..dynamic.policy import BatchPolicy
from ..hooks import BACKLOG_DELAY_ENV, DELAY_ENV, Driver, hold_count
from ..instances import InstancePool, InstanceWorker
from .requests import RESCHEDULED, RowOutputs, execute_request_rows
from .slots import LiveSequence, SequenceTable
from .states import state_specs
from .tensors import build_sequence_inputs, control_specs

__all__ = ["SequenceBatchScheduler"]

_CORRID = mc.ModelSequenceBatching.Control.CONTROL_SEQUENCE_CORRID

log = logging.getLogger(__name__)

#: The message the other queued requests of a cancelled sequence get with code CANCELLED:
#: none, as Triton 2.51 answers them (its Status(CANCELLED), checked on the reference).
SEQUENCE_CANCELLED = ""
Rows = list[Job | None]
#: A row's new state: the arrays (None when its instance holds them) and their shapes.
RowState = tuple[list[Array] | None, StateShapes]
RowResult = tuple[list[RowOutputs], list[RowState | None], BatchTimings]


class SequenceBatchScheduler:
    def __init__(
        self,
        config: mc.ModelConfig,
        pool: InstancePool,
        stats: ModelStats,
        declared: Mapping[str, Sequence[int]],
        model_path: Path,
        clock: Callable[[], int] = time.monotonic_ns,
    ) -> None:
        batching = config.sequence_batching
        self._name = config.name
        self._pool = pool
        self._stats = stats
        self._clock = clock
        self._declared = dict(declared)
        self._batched = config.max_batch_size > 0
        self._controls = control_specs(batching)
        self._states = state_specs(batching, model_path)
        self._state_outputs = [s.output_name for s in self._states]
        self._initial_shapes = tuple(spec.initial.shape for spec in self._states)
        # Instances that hold the state themselves, and per instance the sequences released
        # since its last batch (their keys ride with the next one: no round trip of its own).
        self._holders = [
            bool(self._states) and isinstance(w.instance, StateHolder) for w in pool.workers
        ]
        self._forget: list[list[int]] = [[] for _ in pool.workers]
        self._oldest = batching.WhichOneof("strategy_choice") == "oldest"
        rows = max(config.max_batch_size, 1)
        if self._oldest:
            oldest = batching.oldest
            capacity = oldest.max_candidate_sequences or rows
            self._policy = BatchPolicy(
                max_batch_size=rows,
                preferred=tuple(sorted({p for p in oldest.preferred_batch_size if 0 < p <= rows})),
                max_queue_delay_ns=oldest.max_queue_delay_microseconds * 1000,
            )
        else:
            capacity = rows
            self._policy = BatchPolicy(
                max_batch_size=rows,
                max_queue_delay_ns=batching.direct.max_queue_delay_microseconds * 1000,
            )
        self._min_utilization = batching.direct.minimum_slot_utilization
        # Triton's IterativeSequencer: a request without a correlation ID starts a sequence
        # of its own, and a model may release a request with RESCHEDULE to run it again.
        self._iterative = batching.iterative_sequence
        self._sequence_ids = itertools.count(1)
        idle_us = batching.max_sequence_idle_microseconds or SEQUENCE_IDLE_DEFAULT_US
        self._table = SequenceTable(
            config.name, len(pool.workers), capacity, idle_us * 1000, self._released
        )
        self._delay_count = hold_count(DELAY_ENV)
        self._backlog_delay = hold_count(BACKLOG_DELAY_ENV)
        self._driver = Driver(f"sequencer-{config.name}", self._step)
        self._executing = 0
        self._owners: dict[int, LiveSequence] = {}  # id(job) -> its sequence
        self._inflight = 0
        self._stopping = False  # unloading: sequences already started may still finish
        self._closed = False
        # The scheduler of the version an instance-group update replaced, while it still
        # has sequences in progress: their later requests go on there (``follow``).
        self._predecessor: SequenceBatchScheduler | None = None
        pool.on_release(self._driver.wake)

    @property
    def inflight(self) -> int:
        return self._inflight

    async def submit(self, job: Job) -> ExecutionResult:
        """Triton's order of checks: batch size, correlation ID, then the sequence flags."""
        if self._closed or (self._stopping and job.sequence_start):
            raise Unavailable(
                "Server is stopping, scheduler for model has stopped accepting new "
                "inference requests"
            )
        if job.batch_size > 1:
            raise InvalidArgument(
                f"inference request to model '{self._name}' must specify batch-size 1 due "
                "to requirements of sequence batcher"
            )
        if self._iterative:
            if job.correlation_id in (None, 0, ""):
                job.correlation_id = next(self._sequence_ids)
                job.sequence_start = True
            job.reschedulable = job.sequence_start
        elif job.correlation_id in (None, 0, ""):
            raise InvalidArgument(
                f"inference request to model '{self._name}' must specify a non-zero or "
                "non-empty correlation ID"
            )
        self._check_correlation_id(job.correlation_id)
        if self._predecessor is not None:
            earlier = self._continued_by(job.correlation_id)
            if earlier is not None and not job.sequence_start:
                return await earlier.submit(job)
            if earlier is not None:  # restarted here: the old one ends there
                earlier._end_restarted(job.correlation_id)
        loop = asyncio.get_running_loop()
        job.enqueue_ns = self._clock()
        self._owners[id(job)] = self._table.accept(job, job.enqueue_ns)  # may raise
        job.future = loop.create_future()
        self._inflight += 1
        self._driver.wake()
        try:
            return await job.future
        except asyncio.CancelledError:
            self._driver.wake()
            count_if_delivered_too_late(self._stats, job, job.future, self._clock())
            raise
        finally:
            self._inflight -= 1
            self._owners.pop(id(job), None)

    def continues_sequence(self, correlation_id: int | str) -> bool:
        """Shutdown hook (base.SequenceHolder): a sequence in progress may finish (here or
        in a version an update replaced)."""
        if self._table.continues(correlation_id):
            return True
        predecessor = self._predecessor
        return predecessor is not None and predecessor.continues_sequence(correlation_id)

    def active_sequences(self) -> int:
        """Shutdown hook (base.SequenceHolder): what the server's drain waits for."""
        predecessor = self._predecessor
        return len(self._table) + (predecessor.active_sequences() if predecessor else 0)

    def follow(self, predecessor: SequenceBatchScheduler) -> None:
        """This scheduler's version replaced ``predecessor``'s in an instance-group
        update (core/instance_update.py): the sequences in progress there stay there, on
        their instance and with their state, as Triton keeps a sequence's slot through
        an update; their later requests arrive here and are passed on until they end."""
        if predecessor.active_sequences():
            self._predecessor = predecessor

    def _continued_by(self, cid: int | str | None) -> SequenceBatchScheduler | None:
        """The replaced scheduler where a request for ``cid`` (no START) continues its
        sequence, if it is not one of ours."""
        if cid is None or self._table.continues(cid):
            return None
        predecessor = self._predecessor
        while predecessor is not None:
            if predecessor._closed:  # retired: so are the ones before it
                if predecessor is self._predecessor:
                    self._predecessor = None
                break
            if predecessor._table.continues(cid):
                return predecessor
            predecessor = predecessor._predecessor
        if self._predecessor is not None and not self._predecessor.active_sequences():
            self._predecessor = None  # all of them ended: nothing more to pass on
        return None

    def _end_restarted(self, cid: int | str | None) -> None:
        """A START for ``cid`` began a sequence in the version that replaced this one:
        the one here ends early (what it queued still runs), as a START ends a live
        sequence of that ID within one scheduler (``SequenceTable.accept``)."""
        sequence = self._table.route(cid) if cid is not None else None
        if sequence is None:
            return
        log.warning(
            "sequence %s for model '%s' has a conflict. The previous sequence did not end "
            "before this sequence start. Previous sequence will be terminated early.",
            cid,
            self._name,
        )
        self._table.end(sequence)
        if sequence.finished:
            self._table.release(sequence)
        self._driver.wake()

    async def sequences_ended(self) -> None:
        """Wait until every sequence here has ended or idled out (an instance-group update
        retires this version in the background after that)."""
        while len(self._table):
            self._driver.wake()
            await asyncio.sleep(0.05)

    def _check_correlation_id(self, cid: int | str | None) -> None:
        """The id must fit the CORRID control's type, or every row of its batch would fail."""
        corrid = next((c for c in self._controls if c.kind == _CORRID), None)
        if corrid is None:
            return
        if corrid.dtype == np.object_:
            if not isinstance(cid, str):
                raise InvalidArgument(
                    f"inference request to model '{self._name}' must use a string sequence "
                    f"ID: its CORRID control is TYPE_STRING, got {cid!r}"
                )
            return
        info = np.iinfo(corrid.dtype)
        if not isinstance(cid, int) or not info.min <= cid <= info.max:
            raise InvalidArgument(
                f"sequence ID {cid!r} for model '{self._name}' does not fit its CORRID control "
                f"of type {corrid.dtype.name} [{info.min}, {info.max}]"
            )

    def _step(self) -> None:
        now = self._clock()
        self._drop_cancelled()
        for sequence in self._table.expire_idle(now):
            log.debug(
                "model '%s': sequence %s: max sequence idle exceeded", self._name, sequence.cid
            )
        for sequence in self._table.expire_backlog(now):
            self._reject(sequence)
        if self._holding():
            return
        wait_until = None
        for worker in self._pool.workers:
            if not self._pool.is_free(worker.index):
                continue
            rows, due = self._rows(worker.index, now)
            if rows:
                taken = self._pool.take(worker.index)
                assert taken is not None
                self._dispatch(taken, rows)
            elif due is not None and (wait_until is None or due < wait_until):
                wait_until = due
        due = self._table.next_deadline()
        if due is not None and (wait_until is None or due < wait_until):
            wait_until = due
        self._driver.arm(wait_until, now)

    def _reject(self, sequence: LiveSequence) -> None:
        """A backlogged sequence timed out: its queued requests fail (Triton's text)."""
        while sequence.pending:
            job = sequence.pending.popleft()
            if job.future is not None and not job.future.done():
                job.future.set_exception(
                    Unavailable("timeout of the corresponding sequence has been expired")
                )

    def _holding(self) -> bool:
        """Triton's test hooks: hold scheduling until enough requests are queued."""
        if self._delay_count:
            if self._table.pending_count() < self._delay_count:
                return True
            self._delay_count = 0
        if self._backlog_delay:
            if self._table.backlog_count() < self._backlog_delay:
                return True
            self._backlog_delay = 0
        return False

    def _drop_cancelled(self) -> None:
        """A queued request whose caller left cancels its whole sequence, as in Triton:
        every request of it still queued is answered CANCELLED (each a CANCELED failure)
        and the sequence ends, so a later request for its ID needs START. A request that
        runs now finishes; the sequence's room is freed once it has."""
        now = self._clock()
        for sequence in self._table.sequences():
            if not any(caller_gone(job) for job in sequence.pending):
                continue
            log.debug("model '%s': sequence %s cancelled", self._name, sequence.cid)
            while sequence.pending:
                job = sequence.pending.popleft()
                if job.future is None or job.future.done():
                    self._stats.record_cancelled(now - job.enqueue_ns, job.size)
                else:  # counted by its caller, under the failure reason given here
                    job.future.set_exception(Cancelled(SEQUENCE_CANCELLED, failure="CANCELED"))
            self._table.end(sequence)
            if sequence.finished:
                self._table.release(sequence)

    def _rows(self, instance: int, now: int) -> tuple[Rows, int | None]:
        """The batch this instance should run now (empty: none), or when to look again."""
        rooms = self._table.rooms(instance)
        if self._oldest:
            heads = sorted(
                (s.head for s in rooms if s is not None and s.head is not None),
                key=lambda job: job.enqueue_ns,
            )
            heads = [j for j in heads if self._key(j) == self._key(heads[0])] if heads else []
            decision = self._policy.decide(heads, now)
            return list(heads[: decision.take]), decision.wait_until_ns
        rows: Rows = [s.head if s is not None else None for s in rooms]
        first = next((j for j in rows if j is not None), None)
        if first is None:
            return [], None
        key = self._key(first)
        rows = [j if j is not None and self._key(j) == key else None for j in rows]
        ready = [j for j in rows if j is not None]
        delay = self._policy.max_queue_delay_ns
        if delay and len(ready) < self._min_utilization * len(rows):
            due = min(j.enqueue_ns for j in ready) + delay
            if now < due:
                return [], due
        while rows and rows[-1] is None:
            rows.pop()
        return rows, None

    def _key(self, job: Job) -> tuple[object, ...]:
        """Rows share an execution only when inputs and states agree in shape."""
        sequence = self._sequence_of(job)
        if sequence is not None and sequence.shapes is not None and not job.sequence_start:
            return (job.shape_key(), sequence.shapes)
        return (job.shape_key(), self._initial_shapes)

    def _sequence_of(self, job: Job) -> LiveSequence | None:
        return self._owners.get(id(job))

    def _released(self, sequence: LiveSequence) -> None:
        """SequenceTable's hook: a sequence whose state its instance holds is forgotten
        there with that instance's next batch."""
        instance = sequence.instance
        if instance is not None and self._holders[instance] and sequence.shapes is not None:
            self._forget[instance].append(sequence.key)

    def _dispatch(self, worker: InstanceWorker, rows: Rows) -> None:
        sequences = [self._sequence_of(job) if job is not None else None for job in rows]
        for sequence in sequences:
            if sequence is not None:
                sequence.pending.popleft()
                sequence.executing = True
        # A START (also one that restarts a live sequence) begins from the initial state.
        fresh = [
            s is None or j is None or j.sequence_start or s.shapes is None
            for j, s in zip(rows, sequences, strict=True)
        ]
        outputs = union_outputs([j for j in rows if j is not None])
        held: SequenceRows | None = None
        states: list[list[Array] | None] = [None] * len(rows)
        if self._holders[worker.index]:
            keys = tuple(s.key if s is not None else None for s in sequences)
            forget, self._forget[worker.index] = self._forget[worker.index], []
            held = SequenceRows(keys, tuple(fresh), tuple(forget))
        else:
            states = [
                s.states if s is not None and not f else None
                for f, s in zip(fresh, sequences, strict=True)
            ]
            outputs = list(dict.fromkeys([*outputs, *self._state_outputs]))
        self._executing += 1

        def work(instance: ModelInstance | RequestInstance) -> RowResult:
            return self._execute(instance, rows, states, outputs, held)

        def finished(done: asyncio.Future[RowResult]) -> None:
            if held is not None and held.forget and (done.cancelled() or done.exception()):
                # Perhaps never seen by the worker: those keys go with the next batch (one
                # that ended holds nothing, so sending them again is harmless).
                self._forget[worker.index][:0] = held.forget
            self._finished(rows, sequences, done)

        self._pool.launch(worker, work).add_done_callback(finished)

    def _execute(
        self,
        instance: ModelInstance | RequestInstance,
        rows: Rows,
        states: list[list[Array] | None],
        outputs: list[str],
        held: SequenceRows | None,
    ) -> RowResult:
        """One batch, in the instance's thread. ``held``: the instance holds the states."""
        start = self._clock()
        specs = [] if held is not None else self._states
        inputs = build_sequence_inputs(
            rows, states, self._controls, specs, self._declared, self._batched
        )
        if takes_requests(instance):
            # Request backends cannot hand back implicit state (Triton's python backend
            # has no state API): every request of the sequence sees the initial state.
            per_request, timings = execute_request_rows(
                instance, rows, inputs, self._batched, start, self._clock
            )
            return per_request, [None] * len(rows), timings
        input_end = self._clock()
        lost: tuple[int, ...] = ()
        if held is None:
            results = cast(ModelInstance, instance).execute(inputs, outputs)
            new_states = self._states_here(rows, results)
        else:
            results, report = cast(StateHolder, instance).execute_holding_state(
                inputs, outputs, held
            )
            new_states = [None if shapes is None else (None, shapes) for shapes in report.shapes]
            lost = report.lost
        input_end, infer_end = compute_bounds(results, input_end, self._clock())
        per_row: list[RowOutputs] = []
        for index, job in enumerate(rows):
            if job is None:
                per_row.append(None)
            elif index in lost:
                per_row.append(self._lost(job, instance.spec.name))
            else:
                pick = slice(index, index + 1) if self._batched else slice(None)
                per_row.append({name: results[name][pick] for name in job.outputs})
        return per_row, new_states, BatchTimings(start, input_end, infer_end, self._clock())

    def _states_here(self, rows: Rows, results: dict[str, Array]) -> list[RowState | None]:
        """Each real row's output states, copied out of the batch's arrays."""
        new_states: list[RowState | None] = []
        for index, job in enumerate(rows):
            if job is None:
                new_states.append(None)
                continue
            arrays = [
                (results[name][index] if self._batched else results[name]).copy()
                for name in self._state_outputs
            ]
            new_states.append((arrays, tuple(a.shape for a in arrays)))
        return new_states

    def _lost(self, job: Job, instance: str) -> ServerError:
        """A request that continues a sequence whose state died with its instance's worker
        process. Internal, as a failed instance's requests are in Triton (a Python model's
        stub that died): the request was valid, the server lost what it needed. Starting
        over from the initial state instead would answer with wrong results, silently."""
        return Internal(
            f"inference request for sequence {job.correlation_id} to model '{self._name}' "
            f"cannot continue it: its implicit state was lost when the worker process of "
            f"instance '{instance}' ended; start the sequence again with the START flag"
        )

    def _finished(
        self,
        rows: Rows,
        sequences: list[LiveSequence | None],
        done: asyncio.Future[RowResult],
    ) -> None:
        self._executing -= 1
        error = done.exception() if not done.cancelled() else Unavailable("execution cancelled")
        if error is None:
            outputs, new_states, timings = done.result()
            self._stats.record_execution(sum(1 for j in rows if j is not None), timings)
        for index, (job, sequence) in enumerate(zip(rows, sequences, strict=True)):
            if job is None or sequence is None:
                continue
            sequence.executing = False
            if error is None:
                state = new_states[index]
                if state is not None:
                    sequence.states, sequence.shapes = state
                out = outputs[index]
                assert out is not None
                if out == RESCHEDULED:
                    self._reschedule(job, sequence)
                    continue
                settle(self._stats, job, outcome_of(job, out, timings), self._clock)
            else:
                settle(self._stats, job, batch_failure(error), self._clock)
            if job.reschedulable:
                # Triton's IterativeSequencer: releasing the request that started the
                # sequence (without RESCHEDULE) ends the sequence.
                self._table.end(sequence)
            if sequence.finished:
                self._table.release(sequence)
        self._driver.wake()

    def _reschedule(self, job: Job, sequence: LiveSequence) -> None:
        """Triton's ``IterativeSequencer::RescheduleRequest``: the request goes back to its
        sequence's queue without START or END and runs again when its turn comes."""
        now = self._clock()
        job.sequence_start = job.sequence_end = False
        job.enqueue_ns = now
        sequence.pending.append(job)
        sequence.last_ns = now

    async def stop(self) -> None:
        """Finish accepted requests, then stop the driver and free the instances."""
        self._stopping = True
        while self._table.busy() or self._executing:
            self._driver.wake()
            await asyncio.sleep(0.01)
        self._closed = True
        self._driver.close()
        await self._pool.aclose()
