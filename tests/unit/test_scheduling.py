"""InstancePool / DefaultScheduler with fake instances."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from service.backends.base import InstanceSpec
from service.errors import Internal
from service.repository.completion import ModelSignature
from service.scheduling.base import Job
from service.scheduling.default import DefaultScheduler
from service.scheduling.instances import InstancePool, InstanceWorker
from service.statistics import ModelStats

# --------------------------------------------------------------------------- fakes


@dataclass
class Execution:
    job: str
    instance: str
    thread: str
    start: float
    end: float


class FakeInstance:
    """Blocking ``execute`` that sleeps ``inputs['delay']`` seconds (or, given a
    ``threading.Event`` as ``inputs['gate']``, sets ``inputs['started']`` and waits until
    the gate is set) and records itself."""

    def __init__(self, name: str, log: list[Execution]) -> None:
        self.spec = InstanceSpec(name=name, kind="KIND_CPU", device_id=0, threads=1)
        self.log = log
        self.closed = False
        self.active = 0
        self.max_active = 0
        self._lock = threading.Lock()

    def execute(self, inputs: Mapping[str, Any], outputs: Sequence[str]) -> dict[str, Any]:
        with self._lock:
            self.active += 1
            self.max_active = max(self.max_active, self.active)
        start = time.monotonic()
        try:
            gate = inputs.get("gate")
            if gate is not None:
                inputs["started"].set()
                gate.wait(60)
            else:
                time.sleep(float(inputs["delay"]))
            if inputs.get("fail"):
                raise Internal(f"job {inputs['job']} failed")
        finally:
            end = time.monotonic()
            with self._lock:
                self.active -= 1
            self.log.append(
                Execution(
                    str(inputs["job"]),
                    self.spec.name,
                    threading.current_thread().name,
                    start,
                    end,
                )
            )
        return {name: np.array(inputs["job"]) for name in outputs}

    def signature(self) -> ModelSignature:
        return ModelSignature(inputs=[], outputs=[])

    def close(self) -> None:
        self.closed = True


@dataclass
class Setup:
    pool: InstancePool
    scheduler: DefaultScheduler
    stats: ModelStats
    instances: list[FakeInstance]
    log: list[Execution]

    def runs(self) -> dict[str, Execution]:
        return {e.job: e for e in self.log}


def make_setup(n: int) -> Setup:
    log: list[Execution] = []
    instances = [FakeInstance(f"inst{i}", log) for i in range(n)]
    pool = InstancePool([InstanceWorker(i) for i in instances])
    stats = ModelStats()
    return Setup(pool, DefaultScheduler(pool, stats), stats, instances, log)


def job(name: str, delay: float, outputs: Sequence[str] = (), **extra: Any) -> Job:
    return Job({"job": name, "delay": delay, **extra}, list(outputs), 0)  # type: ignore[dict-item]


# ------------------------------------------------------------------------ pool + default scheduler


async def test_n_instances_run_n_executions_in_parallel() -> None:
    s = make_setup(3)
    try:
        results = await asyncio.gather(
            *(s.scheduler.submit(job(str(i), 0.3, ["OUT"])) for i in range(3))
        )
    finally:
        s.pool.close()
    assert [r.outputs["OUT"].item() for r in results] == ["0", "1", "2"]
    assert sorted(e.instance for e in s.log) == ["inst0", "inst1", "inst2"]
    assert len({e.thread for e in s.log}) == 3
    # every interval overlaps every other one
    assert max(e.start for e in s.log) < min(e.end for e in s.log)
    assert all(i.max_active == 1 for i in s.instances)
    assert s.stats.execution_count == 3


async def test_request_n_plus_1_waits_for_first_free_instance() -> None:
    """Both instances are held on gates (no sleep decides who runs where, however busy the
    machine): the third request waits for the first instance to be let go, runs there and
    ends while the second instance is still busy."""
    s = make_setup(2)
    gates = {name: (threading.Event(), threading.Event()) for name in ("short", "long")}

    def held(name: str) -> Job:
        started, gate = gates[name]
        return job(name, 0, gate=gate, started=started)

    try:
        first = asyncio.ensure_future(s.scheduler.submit(held("short")))
        second = asyncio.ensure_future(s.scheduler.submit(held("long")))
        for started, _ in gates.values():  # both are executing now
            assert await asyncio.to_thread(started.wait, 60)
        third = asyncio.ensure_future(s.scheduler.submit(job("third", 0.01)))
        await asyncio.sleep(0.05)
        assert s.scheduler.inflight == 3
        assert not third.done()
        gates["short"][1].set()
        await asyncio.wait_for(asyncio.shield(third), 60)
        assert not second.done()  # the third did not wait for the busy instance
        gates["long"][1].set()
        results = await asyncio.gather(first, second, third)
    finally:
        for _, gate in gates.values():
            gate.set()
        s.pool.close()
    runs = s.runs()
    assert runs["third"].instance == runs["short"].instance
    assert runs["third"].start >= runs["short"].end
    assert runs["third"].end < runs["long"].end
    assert s.scheduler.inflight == 0
    # the third request queued at least until the first one was let go
    assert results[2].queue_ns >= 0.05e9
    assert results[0].queue_ns < results[2].queue_ns


async def test_waiting_requests_are_served_in_fifo_order() -> None:
    s = make_setup(1)
    try:
        tasks = []
        for i in range(5):
            tasks.append(asyncio.ensure_future(s.scheduler.submit(job(str(i), 0.03))))
            await asyncio.sleep(0)  # each task reaches the queue before the next is created
        await asyncio.gather(*tasks)
    finally:
        s.pool.close()
    assert [e.job for e in s.log] == ["0", "1", "2", "3", "4"]
    assert all(a.end <= b.start for a, b in zip(s.log, s.log[1:], strict=False))


async def test_cancelled_caller_does_not_free_instance_early() -> None:
    s = make_setup(2)
    try:
        doomed = asyncio.ensure_future(s.scheduler.submit(job("cancelled", 0.6)))
        await asyncio.sleep(0.02)
        busy = asyncio.ensure_future(s.scheduler.submit(job("busy", 0.3)))
        await asyncio.sleep(0.05)
        doomed.cancel()
        with pytest.raises(asyncio.CancelledError):
            await doomed
        # The cancelled job's thread is still running: the next job must wait for the
        # instance that frees first ("busy"), not be handed the cancelled job's instance.
        await s.scheduler.submit(job("next", 0.05))
        await busy
        # and once the cancelled execution has returned, its instance is usable again
        await asyncio.sleep(0.65)
        await asyncio.gather(s.scheduler.submit(job("a", 0.05)), s.scheduler.submit(job("b", 0.05)))
    finally:
        s.pool.close()
    runs = s.runs()
    assert runs["next"].instance == runs["busy"].instance
    assert runs["next"].instance != runs["cancelled"].instance
    assert runs["next"].start < runs["cancelled"].end
    for e in s.log:  # no execution overlapped the cancelled one on its instance
        if e.instance == runs["cancelled"].instance and e.job != "cancelled":
            assert e.start >= runs["cancelled"].end
    assert {runs["a"].instance, runs["b"].instance} == {"inst0", "inst1"}
    assert all(i.max_active == 1 for i in s.instances)


async def test_cancelled_while_queued_never_executes() -> None:
    s = make_setup(1)
    # "running" holds the one instance until the cancel is done, however busy the machine
    started, gate = threading.Event(), threading.Event()
    try:
        running = asyncio.ensure_future(
            s.scheduler.submit(job("running", 0, gate=gate, started=started))
        )
        assert await asyncio.to_thread(started.wait, 60)
        queued = asyncio.ensure_future(s.scheduler.submit(job("queued", 0.01)))
        await asyncio.sleep(0.02)
        queued.cancel()
        await asyncio.gather(queued, return_exceptions=True)
        gate.set()
        await running
        await s.scheduler.submit(job("after", 0.01))
    finally:
        s.pool.close()
    assert [e.job for e in s.log] == ["running", "after"]
    assert s.stats.cancelled == 1
    assert s.scheduler.inflight == 0


async def test_event_loop_keeps_running_during_execute() -> None:
    s = make_setup(1)
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    tick_task = asyncio.create_task(ticker())
    try:
        await s.scheduler.submit(job("slow", 0.3))
    finally:
        tick_task.cancel()
        s.pool.close()
    # A loop blocked by the execution would not tick at all; a busy machine may let
    # fewer than 30 ticks of 10 ms through in 0.3 s.
    assert ticks >= 3, f"event loop ticked only {ticks} times during a 0.3 s execute"


async def test_execute_error_propagates_and_instance_returns() -> None:
    s = make_setup(1)
    try:
        with pytest.raises(Internal, match="job bad failed"):
            await s.scheduler.submit(job("bad", 0.01, fail=True))
        result = await asyncio.wait_for(s.scheduler.submit(job("good", 0.01, ["Y"])), 2)
    finally:
        s.pool.close()
    assert result.outputs["Y"].item() == "good"
    assert [e.job for e in s.log] == ["bad", "good"]
    assert s.stats.execution_count == 1  # only the successful execution is recorded


async def test_executions_run_on_the_instance_named_thread() -> None:
    s = make_setup(1)
    try:
        await s.scheduler.submit(job("x", 0.0))
    finally:
        s.pool.close()
    assert s.log[0].thread.startswith("inst0")
    assert s.log[0].thread != threading.current_thread().name


async def test_pool_hands_out_workers_fifo_and_launch_releases_when_done() -> None:
    log: list[Execution] = []
    instances = [FakeInstance(f"inst{i}", log) for i in range(2)]
    pool = InstancePool([InstanceWorker(i) for i in instances])
    released: list[int] = []
    pool.on_release(lambda: released.append(1))
    try:
        w0 = pool.try_acquire()
        w1 = pool.try_acquire()
        assert w0 is not None and w1 is not None
        assert [w0.instance, w1.instance] == instances
        assert not pool.has_free
        assert pool.try_acquire() is None
        task = pool.launch_jobs(w0, [job("x", 0.1, ["O"])])
        await asyncio.sleep(0.03)
        assert not pool.has_free and released == []  # w0 is still executing
        outputs, timings = await task
        assert outputs == [{"O": np.array("x")}]
        assert timings.start <= timings.input_end <= timings.infer_end <= timings.end
        assert released == [1]
        assert pool.try_acquire() is w0  # released before the caller saw the result
        pool.release(w1)
        pool.release(w0)
        assert pool.take(1) is w1 and pool.take(1) is None
    finally:
        pool.close()
    assert all(i.closed for i in instances)


async def test_launch_delivers_an_execution_error_and_frees_the_instance() -> None:
    log: list[Execution] = []
    pool = InstancePool([InstanceWorker(FakeInstance("inst0", log))])
    try:
        worker = pool.try_acquire()
        assert worker is not None
        with pytest.raises(Internal, match="job bad failed"):
            await pool.launch_jobs(worker, [job("bad", 0.0, fail=True)])
        assert pool.has_free
    finally:
        pool.close()


async def test_completions_finishing_together_wake_the_loop_once() -> None:
    """Work that finishes while the loop is busy is delivered in one batch."""
    log: list[Execution] = []
    s_pool = InstancePool([InstanceWorker(FakeInstance(f"inst{i}", log)) for i in range(3)])
    loop = asyncio.get_running_loop()
    wakeups = 0
    original = loop.call_soon_threadsafe

    def counting(*args: Any, **kwargs: Any) -> Any:
        nonlocal wakeups
        wakeups += 1
        return original(*args, **kwargs)

    loop.call_soon_threadsafe = counting  # type: ignore[method-assign]
    delivered: list[str] = []
    try:
        for index in range(3):
            worker = s_pool.try_acquire()
            assert worker is not None
            s_pool.dispatch(
                worker,
                lambda instance, i=index: instance.execute(  # type: ignore[union-attr]
                    {"job": str(i), "delay": 0.0}, []
                ),
                lambda outcome, error, i=index: delivered.append(str(i)),
            )
        time.sleep(0.2)  # noqa: ASYNC251 - block the loop: all three finish before a drain
        await asyncio.sleep(0.01)
    finally:
        del loop.call_soon_threadsafe
        s_pool.close()
    assert sorted(delivered) == ["0", "1", "2"]
    assert wakeups == 1


async def test_default_scheduler_counts_inflight_and_stops() -> None:
    s = make_setup(1)
    assert s.scheduler.inflight == 0
    tasks = [asyncio.ensure_future(s.scheduler.submit(job(str(i), 0.1, ["O"]))) for i in range(3)]
    await asyncio.sleep(0.02)
    assert s.scheduler.inflight == 3  # one executing, two queued
    results = await asyncio.gather(*tasks)
    assert [r.outputs["O"].item() for r in results] == ["0", "1", "2"]
    assert s.scheduler.inflight == 0
    await s.scheduler.stop()
    assert s.instances[0].closed
