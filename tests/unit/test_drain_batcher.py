"""DrainBatchScheduler: plain dynamic batching formed by the instance threads, driven with
the fake instances of test_dynamic_batcher on a real loop."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pytest
from executed import executed_rows
from test_dynamic_batcher import Doubler, config, request

from service.errors import Internal, Unavailable
from service.scheduling.base import Job
from service.scheduling.dynamic.batcher import DynamicBatchScheduler
from service.scheduling.dynamic.drain import DrainBatchScheduler
from service.scheduling.factory import create_scheduler
from service.scheduling.inline import QUALIFY_RUNS
from service.scheduling.instances import InstancePool, InstanceWorker
from service.statistics import ModelStats


def make(
    *instances: Doubler, max_batch: int = 64, **batching: Any
) -> tuple[DrainBatchScheduler, ModelStats]:
    stats = ModelStats()
    pool = InstancePool([InstanceWorker(i) for i in instances])
    scheduler = create_scheduler(config(max_batch, **batching), pool, stats)
    assert isinstance(scheduler, DrainBatchScheduler)
    return scheduler, stats


def gated() -> Doubler:
    fake = Doubler()
    fake.gate = threading.Event()
    return fake


async def hold_first(scheduler: DrainBatchScheduler, fake: Doubler) -> asyncio.Task[Any]:
    """Submit one request and wait until the instance executes it (held at its gate)."""
    first = asyncio.create_task(scheduler.submit(request(-1)))
    await asyncio.to_thread(fake.started.wait)
    return first


@pytest.mark.parametrize(
    ("batching", "plain"),
    [
        ({}, True),
        ({"preferred_batch_size": [8]}, True),  # what the config's normalisation writes
        ({"preferred_batch_size": [4]}, False),
        ({"max_queue_delay_microseconds": 100}, False),
        ({"preserve_ordering": True}, False),
        ({"priority_levels": 2, "default_priority_level": 1}, False),
    ],
)
async def test_only_plain_configs_are_drained(batching: dict[str, Any], plain: bool) -> None:
    pool = InstancePool([InstanceWorker(Doubler())])
    scheduler = create_scheduler(config(8, **batching), pool, ModelStats())
    kind = DrainBatchScheduler if plain else DynamicBatchScheduler
    assert type(scheduler) is kind
    await scheduler.stop()


async def test_the_delay_hook_keeps_the_full_batcher(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITONSERVER_DELAY_SCHEDULER", "3")
    pool = InstancePool([InstanceWorker(Doubler())])
    scheduler = create_scheduler(config(8), pool, ModelStats())
    assert type(scheduler) is DynamicBatchScheduler
    await scheduler.stop()


async def test_requests_queued_behind_a_busy_instance_become_one_batch() -> None:
    fake = gated()
    scheduler, stats = make(fake)
    first = await hold_first(scheduler, fake)
    queued = [asyncio.create_task(scheduler.submit(request(i))) for i in range(5)]
    await asyncio.sleep(0.05)
    assert fake.gate is not None
    fake.gate.set()
    await first
    results = await asyncio.gather(*queued)
    assert fake.batches == [1, 5]
    for i, result in enumerate(results):
        np.testing.assert_array_equal(result.outputs["Y"], np.full((1, 3), 2 * i, np.float32))
    assert (stats.execution_count, executed_rows(stats)) == (2, 6)
    assert stats.batches[5].compute_infer.count == 1
    await scheduler.stop()


async def test_a_batch_never_exceeds_max_batch_size() -> None:
    fake = gated()
    scheduler, stats = make(fake, max_batch=4)
    first = await hold_first(scheduler, fake)
    queued = [asyncio.create_task(scheduler.submit(request(i))) for i in range(7)]
    queued.append(asyncio.create_task(scheduler.submit(request(7, batch=3))))
    await asyncio.sleep(0.05)
    assert fake.gate is not None
    fake.gate.set()
    await asyncio.gather(first, *queued)
    assert fake.batches == [1, 4, 3, 3]  # 4 singles; 3 singles (+3 would make 6); the 3
    assert executed_rows(stats) == 11
    await scheduler.stop()


async def test_requests_of_another_shape_start_a_new_batch_in_order() -> None:
    fake = gated()
    scheduler, _ = make(fake)
    first = await hold_first(scheduler, fake)
    narrow = [Job({"X": np.full((1, 3), i, np.float32)}, ["Y"], 1) for i in range(2)]
    wide = [Job({"X": np.full((1, 5), i, np.float32)}, ["Y"], 1) for i in range(2)]
    order = [narrow[0], wide[0], wide[1], narrow[1]]
    tasks = [asyncio.create_task(scheduler.submit(job)) for job in order]
    await asyncio.sleep(0.05)
    assert fake.gate is not None
    fake.gate.set()
    results = await asyncio.gather(first, *tasks)
    assert fake.batches == [1, 1, 2, 1]
    assert [r.outputs["Y"].shape for r in results[1:]] == [(1, 3), (1, 5), (1, 5), (1, 3)]
    await scheduler.stop()


async def test_a_cancelled_queued_request_is_skipped_and_counted() -> None:
    fake = gated()
    scheduler, stats = make(fake)
    first = await hold_first(scheduler, fake)
    keep = asyncio.create_task(scheduler.submit(request(1)))
    leave = asyncio.create_task(scheduler.submit(request(2)))
    await asyncio.sleep(0.01)
    leave.cancel()
    with pytest.raises(asyncio.CancelledError):
        await leave
    assert fake.gate is not None
    fake.gate.set()
    await asyncio.gather(first, keep)
    assert fake.batches == [1, 1]
    assert stats.cancelled == 1
    assert (stats.execution_count, executed_rows(stats)) == (2, 2)
    await scheduler.stop()


async def test_a_failing_batch_fails_each_of_its_requests_and_serving_goes_on() -> None:
    fake = gated()
    scheduler, _ = make(fake)
    first = await hold_first(scheduler, fake)
    fake.fail = True
    queued = [asyncio.create_task(scheduler.submit(request(i))) for i in range(3)]
    await asyncio.sleep(0.05)
    assert fake.gate is not None
    fake.gate.set()
    results = await asyncio.gather(first, *queued, return_exceptions=True)
    assert all(isinstance(r, Internal) and "boom" in r.message for r in results)
    fake.fail = False
    again = await scheduler.submit(request(4))
    np.testing.assert_array_equal(again.outputs["Y"], np.full((1, 3), 8, np.float32))
    await scheduler.stop()


async def test_a_second_instance_serves_while_the_first_is_busy() -> None:
    a, b = gated(), gated()
    scheduler, _ = make(a, b)
    first = asyncio.create_task(scheduler.submit(request(-1)))
    await asyncio.to_thread(lambda: a.started.wait(5) or b.started.wait(5))
    held, free = (a, b) if a.started.is_set() else (b, a)
    assert free.gate is not None and held.gate is not None
    free.gate.set()
    second = await asyncio.wait_for(scheduler.submit(request(2)), 5)  # while the first is held
    np.testing.assert_array_equal(second.outputs["Y"], np.full((1, 3), 4, np.float32))
    assert free.batches == [1] and not first.done()
    held.gate.set()
    await first
    assert held.batches == [1]
    await scheduler.stop()


async def test_max_batch_size_zero_runs_requests_one_at_a_time() -> None:
    fake = gated()
    scheduler, _ = make(fake, max_batch=0)
    first = asyncio.create_task(scheduler.submit(Job({"X": np.zeros((3,), np.float32)}, ["Y"], 0)))
    await asyncio.to_thread(fake.started.wait)
    rest = [
        asyncio.create_task(scheduler.submit(Job({"X": np.ones((3,), np.float32)}, ["Y"], 0)))
        for _ in range(3)
    ]
    await asyncio.sleep(0.02)
    assert fake.gate is not None
    fake.gate.set()
    results = await asyncio.gather(first, *rest)
    assert len(fake.batches) == 4 and all(r.outputs["Y"].shape == (3,) for r in results)
    await scheduler.stop()


async def test_stop_finishes_queued_requests_then_refuses_new_ones() -> None:
    fake = gated()
    scheduler, stats = make(fake)
    first = await hold_first(scheduler, fake)
    queued = asyncio.create_task(scheduler.submit(request(1)))
    await asyncio.sleep(0.01)
    stopping = asyncio.create_task(scheduler.stop())
    await asyncio.sleep(0.01)
    with pytest.raises(Unavailable, match="unloading"):
        await scheduler.submit(request(2))
    assert fake.gate is not None
    fake.gate.set()
    await asyncio.gather(first, queued, stopping)
    assert executed_rows(stats) == 2


class ThreadRecorder(Doubler):
    """A Doubler that also records the thread of each execution."""

    def __init__(self) -> None:
        super().__init__()
        self.threads: list[int] = []

    def execute(self, inputs: Mapping[str, Any], outputs: Sequence[str]) -> dict[str, Any]:
        self.threads.append(threading.get_ident())
        return super().execute(inputs, outputs)


async def qualified(max_batch: int = 64) -> tuple[DrainBatchScheduler, ModelStats, ThreadRecorder]:
    """A fast model whose threads have executed enough one-request batches, one request a
    turn, for its batches to run on the loop from now on (decision 075)."""
    fake = ThreadRecorder()
    scheduler, stats = make(fake, max_batch=max_batch)
    for i in range(QUALIFY_RUNS):
        await asyncio.sleep(0)
        await scheduler.submit(request(i))
    assert threading.get_ident() not in fake.threads  # the first runs are the threads'
    assert scheduler.inline is not None and scheduler.inline.open
    return scheduler, stats, fake


async def test_requests_of_one_turn_drain_as_one_batch_on_the_loop() -> None:
    scheduler, stats, fake = await qualified()
    try:
        results = await asyncio.gather(*(scheduler.submit(request(i)) for i in range(5)))
    finally:
        await scheduler.stop()
    assert fake.batches[QUALIFY_RUNS:] == [5]
    assert fake.threads[QUALIFY_RUNS:] == [threading.get_ident()]
    for i, result in enumerate(results):
        np.testing.assert_array_equal(result.outputs["Y"], np.full((1, 3), 2 * i, np.float32))
    assert (stats.execution_count, executed_rows(stats)) == (QUALIFY_RUNS + 1, QUALIFY_RUNS + 5)
    assert stats.batches[5].compute_infer.count == 1
    assert scheduler.inline is not None and scheduler.inline.inline_runs == 1
    assert scheduler.inflight == 0


async def test_what_a_batch_on_the_loop_leaves_goes_to_the_threads() -> None:
    scheduler, stats, fake = await qualified(max_batch=4)
    try:
        results = await asyncio.gather(*(scheduler.submit(request(i)) for i in range(6)))
    finally:
        await scheduler.stop()
    assert fake.batches[QUALIFY_RUNS:] == [4, 2]
    loop_thread = threading.get_ident()
    assert fake.threads[QUALIFY_RUNS] == loop_thread
    assert fake.threads[QUALIFY_RUNS + 1] != loop_thread
    for i, result in enumerate(results):
        np.testing.assert_array_equal(result.outputs["Y"], np.full((1, 3), 2 * i, np.float32))
    assert (stats.execution_count, executed_rows(stats)) == (QUALIFY_RUNS + 2, QUALIFY_RUNS + 6)
    assert scheduler.inflight == 0


async def test_a_batch_failing_on_the_loop_fails_each_of_its_requests() -> None:
    scheduler, stats, fake = await qualified()
    fake.fail = True
    try:
        outcomes = await asyncio.gather(
            *(scheduler.submit(request(i)) for i in range(3)), return_exceptions=True
        )
    finally:
        await scheduler.stop()
    assert fake.threads[QUALIFY_RUNS:] == [threading.get_ident()]
    assert all(isinstance(o, Internal) and "boom" in str(o) for o in outcomes)
    assert stats.execution_count == QUALIFY_RUNS  # a failed execution is not counted
    assert scheduler.inflight == 0
