"""Short executions on the loop's thread (decision 067): which runs go there, which stay
on the instance threads, and that a request counts and fails the same either way."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pytest

from inference import model_config_pb2 as mc
from service.backends.base import InstanceSpec
from service.errors import InvalidArgument
from service.scheduling.base import Job
from service.scheduling.default import DefaultScheduler
from service.scheduling.inline import BOUND_NS, MAX_BYTES, QUALIFY_RUNS, SLOW_NS, InlineGate
from service.scheduling.instances import InstancePool, InstanceWorker
from service.scheduling.rate_limiter import RateLimiter
from service.statistics import ModelStats


class Recorder:
    """Y = X + 1 after ``delay`` seconds; records the thread of each execution and fails
    with ``error`` while it is set."""

    def __init__(self, delay: float = 0.0) -> None:
        self.spec = InstanceSpec("recorder_0", "KIND_CPU", 0, 1)
        self.delay = delay
        self.error: Exception | None = None
        self.threads: list[int] = []

    def execute(self, inputs: Mapping[str, Any], outputs: Sequence[str]) -> dict[str, Any]:
        self.threads.append(threading.get_ident())
        if self.delay:
            time.sleep(self.delay)
        if self.error is not None:
            raise self.error
        return {"Y": inputs["X"] + 1}

    def signature(self) -> Any:
        raise NotImplementedError

    def close(self) -> None:
        pass


def job(width: int = 2) -> Job:
    return Job({"X": np.zeros((1, width), np.float32)}, ["Y"], 0)


async def run(scheduler: DefaultScheduler, count: int, width: int = 2) -> None:
    """``count`` requests one after another, as one waiting client sends them: each in
    a turn of the loop of its own (a turn executes on the loop up to a bound)."""
    for _ in range(count):
        await asyncio.sleep(0)
        result = await scheduler.submit(job(width))
        assert result.outputs["Y"].tolist() == [[1.0] * width]


def scheduler_of(*instances: Recorder) -> tuple[DefaultScheduler, ModelStats]:
    stats = ModelStats()
    pool = InstancePool([InstanceWorker(i) for i in instances])
    return DefaultScheduler(pool, stats, name="recorder"), stats


async def test_a_fast_model_runs_on_the_loop_once_its_threads_measured_it() -> None:
    fast = Recorder()
    scheduler, stats = scheduler_of(fast)
    loop_thread = threading.get_ident()
    try:
        await run(scheduler, QUALIFY_RUNS)
        assert loop_thread not in fast.threads  # the first runs are the threads'
        await run(scheduler, 20)
    finally:
        await scheduler.stop()
    assert fast.threads[QUALIFY_RUNS:] == [loop_thread] * 20
    assert scheduler.inline is not None and scheduler.inline.inline_runs == 20
    # The scheduler's statistics cannot tell where a request ran (the core counts the
    # requests from their results: tests/integration/test_loop_executions.py).
    total = QUALIFY_RUNS + 20
    assert stats.execution_count == total
    batch = stats.batches[1]
    assert batch.compute_input.count == batch.compute_infer.count == total
    assert batch.compute_output.count == total
    assert scheduler.inflight == 0


async def test_a_slow_model_stays_on_its_threads() -> None:
    slow = Recorder(delay=2 * SLOW_NS / 1e9)
    scheduler, _ = scheduler_of(slow)
    try:
        await run(scheduler, 2 * QUALIFY_RUNS)
    finally:
        await scheduler.stop()
    assert threading.get_ident() not in slow.threads
    assert scheduler.inline is not None and scheduler.inline.inline_runs == 0


async def test_a_model_that_turns_slow_goes_back_to_its_threads() -> None:
    model = Recorder()
    scheduler, stats = scheduler_of(model)
    loop_thread = threading.get_ident()
    try:
        await run(scheduler, QUALIFY_RUNS + 1)
        assert model.threads[-1] == loop_thread
        model.delay = 2 * SLOW_NS / 1e9
        await run(scheduler, 2 * QUALIFY_RUNS)
    finally:
        await scheduler.stop()
    slow_runs = model.threads[QUALIFY_RUNS + 1 :]
    # Two slow runs in a row on the loop (one may be the machine's), then the threads.
    assert slow_runs[:2] == [loop_thread] * 2
    assert loop_thread not in slow_runs[2:]
    assert stats.execution_count == 3 * QUALIFY_RUNS + 1


async def test_large_inputs_stay_on_the_threads() -> None:
    model = Recorder()
    scheduler, _ = scheduler_of(model)
    loop_thread = threading.get_ident()
    width = MAX_BYTES // 4 + 1  # float32: one byte over the bound
    try:
        await run(scheduler, QUALIFY_RUNS)
        await run(scheduler, 4, width)
        await run(scheduler, 1)
    finally:
        await scheduler.stop()
    assert loop_thread not in model.threads[QUALIFY_RUNS:-1]
    assert model.threads[-1] == loop_thread  # the gate is open: only the bytes decided


async def test_a_backend_error_on_the_loop_reaches_the_caller_as_from_a_thread() -> None:
    model = Recorder()
    scheduler, stats = scheduler_of(model)
    loop_thread = threading.get_ident()
    texts = []
    try:
        model.error = InvalidArgument("bad input for this model")
        with pytest.raises(InvalidArgument) as on_thread:
            await scheduler.submit(job())
        texts.append(str(on_thread.value))
        model.error = None
        await run(scheduler, QUALIFY_RUNS)
        model.error = InvalidArgument("bad input for this model")
        with pytest.raises(InvalidArgument) as on_loop:
            await scheduler.submit(job())
        texts.append(str(on_loop.value))
    finally:
        await scheduler.stop()
    assert model.threads[0] != loop_thread and model.threads[-1] == loop_thread
    assert texts[0] == texts[1]
    assert stats.execution_count == QUALIFY_RUNS  # a failed run is not recorded here
    assert scheduler.inflight == 0


async def test_a_turn_of_the_loop_executes_up_to_the_bound() -> None:
    """Requests that arrive in one turn of the loop (a frame of many under load) run
    there until the turn has spent the bound; the others run on the threads, beside the
    loop's other work."""
    model = Recorder()
    scheduler, _ = scheduler_of(model)
    loop_thread = threading.get_ident()
    try:
        await run(scheduler, QUALIFY_RUNS)
        model.delay = 2 * BOUND_NS / 1e9  # over the bound, under SLOW_NS
        together = [scheduler.enqueue(job()) for _ in range(3)]
        assert together[0].done() and not any(f.done() for f in together[1:])
        await asyncio.gather(*together)
        model.delay = 0.0
        together = [scheduler.enqueue(job()) for _ in range(3)]  # a new turn
        assert all(f.done() for f in together)
    finally:
        await scheduler.stop()
    assert model.threads[QUALIFY_RUNS] == loop_thread
    assert loop_thread not in model.threads[QUALIFY_RUNS + 1 : QUALIFY_RUNS + 3]
    assert model.threads[-3:] == [loop_thread] * 3


async def test_a_busy_instance_leaves_the_request_to_the_threads() -> None:
    """While the only instance executes on its thread, a new request waits for it in the
    queue (in order) rather than running beside it on the loop."""
    model = Recorder()
    scheduler, _ = scheduler_of(model)
    loop_thread = threading.get_ident()
    try:
        await run(scheduler, QUALIFY_RUNS)
        assert scheduler.inline is not None and scheduler.inline.open
        model.delay = 0.05  # under SLOW_NS on no loop: it runs on the thread
        worker = scheduler._pool.workers[0]
        with worker.turn:  # as the instance's thread holds it while it executes
            pending = scheduler.enqueue(job())
            await asyncio.sleep(0.1)
            assert not pending.done()  # queued for the thread, not run here
        model.delay = 0.0
        assert (await pending).outputs["Y"].tolist() == [[1.0, 1.0]]
    finally:
        await scheduler.stop()
    assert model.threads[-1] != loop_thread


def test_models_with_a_rate_limiter_never_run_on_the_loop() -> None:
    limiter = RateLimiter()
    model = Recorder()
    reservation = limiter.register(model.spec.name, mc.ModelRateLimiter(), 0)
    pool = InstancePool([InstanceWorker(model, limiter=limiter, reservation=reservation)])
    assert DefaultScheduler(pool, ModelStats()).inline is None
    pool.close()


def test_the_gate_opens_on_the_lower_quartile_and_backs_off() -> None:
    gate = InlineGate()
    for _ in range(QUALIFY_RUNS // 4 + 1):  # a quarter and one were quick
        gate.on_thread(10_000)
    for _ in range(QUALIFY_RUNS - QUALIFY_RUNS // 4 - 1):  # the rest waited for the GIL
        gate.on_thread(5_000_000)
    assert gate.open
    gate.on_loop(2 * SLOW_NS)
    assert gate.open  # one slow run: maybe the machine's
    gate.on_loop(2 * SLOW_NS)
    assert not gate.open
    for _ in range(QUALIFY_RUNS):
        gate.on_thread(10_000)
    assert not gate.open  # twice as many runs now
    for _ in range(QUALIFY_RUNS):
        gate.on_thread(10_000)
    assert gate.open


def test_a_pool_an_update_forwarded_offers_no_instance_to_the_loop() -> None:
    """After an instance-group update the retiring pool's instances may be closing: its
    late requests go to the new pool's queue, never onto an old instance on the loop."""
    old = InstancePool([InstanceWorker(Recorder())])
    new = InstancePool([InstanceWorker(Recorder())])
    old.share_inbox()
    new.share_inbox()
    worker = old.inline_worker()
    assert worker is not None  # before: the free instance, its turn taken
    worker.turn.release()
    old.forward(new)
    assert old.inline_worker() is None
    old.close()
    new.close()


async def test_the_builtin_identity_runs_on_the_loop_whatever_its_inputs_size() -> None:
    """Its outputs are views of its inputs (decision 076): 1 MiB executes as fast as 4
    bytes, so once measured it runs on the loop past ``MAX_BYTES``; with a delay (a test
    knob that sleeps) it never does."""
    from service.backends.builtin.identity import IdentityInstance
    from service.scheduling.base import ExecutionResult

    config = mc.ModelConfig(name="identity")
    config.input.add(name="INPUT0", data_type=mc.TYPE_FP32, dims=[-1])
    config.output.add(name="OUTPUT0", data_type=mc.TYPE_FP32, dims=[-1])
    loop_thread = threading.get_ident()
    for delay, on_loop in ((0.0, True), (0.0005, False)):
        instance = IdentityInstance(config, InstanceSpec("identity_0", "KIND_CPU", 0, 1), delay)
        seen: list[int] = []
        execute = instance.execute_requests

        def recorded(*args: Any, execute: Any = execute, seen: list[int] = seen) -> None:
            seen.append(threading.get_ident())
            execute(*args)

        instance.execute_requests = recorded  # type: ignore[method-assign]
        pool = InstancePool([InstanceWorker(instance)])
        scheduler = DefaultScheduler(pool, ModelStats(), name="identity")
        data = np.arange(MAX_BYTES, dtype=np.float32)  # 4 x MAX_BYTES
        try:
            for _ in range(QUALIFY_RUNS + 8):
                await asyncio.sleep(0)
                result: ExecutionResult = await scheduler.submit(
                    Job({"INPUT0": data}, ["OUTPUT0"], 0)
                )
                assert np.shares_memory(result.outputs["OUTPUT0"], data)
        finally:
            await scheduler.stop()
        assert (seen[-8:] == [loop_thread] * 8) is on_loop
        assert loop_thread not in seen[:QUALIFY_RUNS]
