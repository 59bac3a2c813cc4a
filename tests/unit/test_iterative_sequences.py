"""``sequence_batching { iterative_sequence: true }``: Triton's IterativeSequencer
(core r24.10, sequence_utils.h/.cc) in the sequence batcher. A request without a
correlation ID starts a sequence of its own (IDs 1, 2, ... with START); a request that
started its sequence may be released with RESCHEDULE, and then goes back to its
sequence's queue without START/END and runs again; releasing it for good ends the
sequence. A fake request backend reschedules each request ``ROUNDS`` times."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from google.protobuf import text_format

from inference import model_config_pb2 as mc
from service.backends.base import BackendRequest, InstanceSpec, ResponseSender
from service.errors import InvalidArgument
from service.scheduling.base import Job
from service.scheduling.instances import InstancePool, InstanceWorker
from service.scheduling.sequence.batcher import SequenceBatchScheduler
from service.statistics import ModelStats


class IteratingModel:
    """Reschedules a request until it ran ROUNDS times (counted per correlation ID), then
    answers OUTPUT = the number of executions it took. Records (cid, start, end, value) of
    every request it sees; a request it may not reschedule is answered at once."""

    def __init__(self) -> None:
        self.spec = InstanceSpec(name="m_0", kind="KIND_CPU", device_id=0, threads=1)
        self.seen: list[tuple[int | str | None, bool, bool, int]] = []
        self.rounds: dict[int | str | None, int] = {}
        self.gate: threading.Event | None = None
        self._lock = threading.Lock()

    def signature(self) -> None:
        return None

    def execute_requests(
        self, requests: Sequence[BackendRequest], senders: Sequence[ResponseSender]
    ) -> None:
        if self.gate is not None:
            self.gate.wait(5)
        for request, sender in zip(requests, senders, strict=True):
            cid = request.correlation_id
            value = int(request.inputs["INPUT"].reshape(-1)[0])
            with self._lock:
                self.seen.append((cid, request.sequence_start, request.sequence_end, value))
                done = self.rounds[cid] = self.rounds.get(cid, 0) + 1
            if request.reschedulable and done < value:
                request.rescheduled = True  # set_release_flags(RELEASE_RESCHEDULE)
                continue
            sender.send({"OUTPUT": np.array([done], dtype=np.int32)}, final=True)

    def close(self) -> None:
        pass


CONFIG = 'name: "iter" max_batch_size: 0 sequence_batching { iterative_sequence: %s }'


def make(
    iterative: bool = True, clock: list[int] | None = None
) -> tuple[SequenceBatchScheduler, IteratingModel, ModelStats]:
    config = text_format.Parse(CONFIG % ("true" if iterative else "false"), mc.ModelConfig())
    model = IteratingModel()
    stats = ModelStats()
    kwargs = {"clock": lambda: clock[0]} if clock is not None else {}
    scheduler = SequenceBatchScheduler(
        config, InstancePool([InstanceWorker(model)]), stats, {}, Path("."), **kwargs
    )
    return scheduler, model, stats


def job(rounds: int, cid: int | str | None = None, start: bool = False, end: bool = False) -> Job:
    return Job(
        {"INPUT": np.array([rounds], dtype=np.int32)},
        ["OUTPUT"],
        0,
        correlation_id=cid,
        sequence_start=start,
        sequence_end=end,
    )


@pytest.fixture(autouse=True)
def no_test_hooks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRITONSERVER_DELAY_SCHEDULER", raising=False)
    monkeypatch.delenv("TRITONSERVER_BACKLOG_DELAY_SCHEDULER", raising=False)


async def _out(scheduler: SequenceBatchScheduler, request: Job) -> int:
    return int((await asyncio.wait_for(scheduler.submit(request), 5)).outputs["OUTPUT"][0])


async def test_request_without_correlation_id_runs_until_released() -> None:
    """IDs 1 and 2 are given out with START; the rescheduled runs carry neither flag;
    the caller gets the one final answer; every run is an execution."""
    scheduler, model, stats = make()
    try:
        assert await _out(scheduler, job(3)) == 3
        assert await _out(scheduler, job(1, cid=0)) == 1
    finally:
        await scheduler.stop()
    assert model.seen == [
        (1, True, False, 3),
        (1, False, False, 3),
        (1, False, False, 3),
        (2, True, False, 1),
    ]
    assert stats.execution_count == 4
    assert len(scheduler._table) == 0  # both sequences ended when released for good


async def test_non_iterative_model_still_needs_a_correlation_id() -> None:
    scheduler, model, _ = make(iterative=False)
    try:
        with pytest.raises(InvalidArgument, match="must specify a non-zero or non-empty"):
            await scheduler.submit(job(2))
        # With an ID the backend is told the request may not be rescheduled.
        assert await _out(scheduler, job(2, cid=7, start=True, end=True)) == 1
    finally:
        await scheduler.stop()
    assert model.seen == [(7, True, True, 2)]


async def test_release_for_good_ends_a_client_started_sequence() -> None:
    """A client's START request is reschedulable too; once released for good its
    sequence is over (Triton enqueues a cancelled null END request): a continuation
    without START is refused, and the one slot is free for the next sequence."""
    scheduler, model, _ = make()
    try:
        assert await _out(scheduler, job(2, cid="s", start=True)) == 2
        with pytest.raises(InvalidArgument, match="must specify the START flag"):
            await scheduler.submit(job(1, cid="s"))
        assert await _out(scheduler, job(2)) == 2
    finally:
        await scheduler.stop()
    assert [s[:3] for s in model.seen] == [
        ("s", True, False),
        ("s", False, False),
        (1, True, False),
        (1, False, False),
    ]


async def test_rescheduled_request_queues_behind_its_sequence() -> None:
    """The rescheduled request goes to the back of its sequence's queue (Triton's
    Enqueue), so a continuation already queued runs before its next iteration; a
    continuation is not reschedulable (no release callback without START)."""
    scheduler, model, _ = make()
    model.gate = threading.Event()
    try:
        first = asyncio.ensure_future(scheduler.submit(job(2, cid=5, start=True)))
        await asyncio.sleep(0.05)  # the START is executing (held at the gate)
        second = asyncio.ensure_future(scheduler.submit(job(9, cid=5)))
        await asyncio.sleep(0.05)
        model.gate.set()
        await asyncio.wait_for(asyncio.gather(first, second), 5)
    finally:
        await scheduler.stop()
    assert [(cid, start, value) for cid, start, _, value in model.seen] == [
        (5, True, 2),
        (5, False, 9),  # queued before the reschedule: runs first, answered at once
        (5, False, 2),
    ]
    assert int(first.result().outputs["OUTPUT"][0]) == 3
    assert int(second.result().outputs["OUTPUT"][0]) == 2


async def test_rescheduled_request_restarts_its_queue_time() -> None:
    """Triton's Enqueue captures the queue start again: the final answer's queue time is
    from the last reschedule, and the sequence's idle clock is refreshed with it."""
    clock = [1_000]
    scheduler, model, _ = make(clock=clock)

    def tick(*_: object) -> None:
        clock[0] += 1_000_000  # 1 ms per execution

    original = model.execute_requests

    def timed(requests: Sequence[BackendRequest], senders: Sequence[ResponseSender]) -> None:
        tick()
        original(requests, senders)

    model.execute_requests = timed  # type: ignore[method-assign]
    try:
        result = await asyncio.wait_for(scheduler.submit(job(3)), 5)
    finally:
        await scheduler.stop()
    assert int(result.outputs["OUTPUT"][0]) == 3
    assert result.queue_ns == 0  # queued again at the end of the 2nd run, taken at once
    assert len(model.seen) == 3


async def test_caller_gone_while_rescheduled_ends_the_sequence() -> None:
    """A rescheduled request whose caller left is dropped, and its sequence ends, so the
    one slot does not stay taken."""
    scheduler, model, _ = make()
    model.gate = threading.Event()
    try:
        first = asyncio.ensure_future(scheduler.submit(job(5)))
        await asyncio.sleep(0.05)
        first.cancel()
        model.gate.set()
        await asyncio.sleep(0.1)
        assert await _out(scheduler, job(1)) == 1
    finally:
        await scheduler.stop()
    assert model.seen[0][:2] == (1, True)
    assert model.seen[-1][:2] == (2, True)
    assert len(scheduler._table) == 0
