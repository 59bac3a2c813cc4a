"""Hand-offs between the loop and instance threads: the mailbox, the driver, the default
scheduler's shared queue and its cancellation accounting."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pytest

from service.backends.base import InstanceSpec
from service.scheduling.base import Job
from service.scheduling.default import DefaultScheduler
from service.scheduling.handoff import mailbox_for
from service.scheduling.hooks import Driver
from service.scheduling.instances import InstancePool, InstanceWorker
from service.statistics import ModelStats


class Sleeper:
    """Y = X after ``delay`` seconds; records the thread of every execution."""

    def __init__(self, name: str, delay: float) -> None:
        self.spec = InstanceSpec(name, "KIND_CPU", 0, 1)
        self.delay = delay
        self.threads: list[str] = []
        self.started = threading.Event()

    def execute(self, inputs: Mapping[str, Any], outputs: Sequence[str]) -> dict[str, Any]:
        self.started.set()
        self.threads.append(threading.current_thread().name)
        time.sleep(self.delay)
        return {"Y": inputs["X"]}

    def signature(self) -> Any:
        raise NotImplementedError

    def close(self) -> None:
        pass


def job() -> Job:
    return Job({"X": np.zeros((1, 2), np.float32)}, ["Y"], 0)


async def test_mailbox_runs_every_call_even_when_one_raises() -> None:
    loop = asyncio.get_running_loop()
    box = mailbox_for(loop)
    assert mailbox_for(loop) is box  # one per loop
    seen: list[int] = []
    errors: list[BaseException] = []
    loop.set_exception_handler(lambda _loop, context: errors.append(context["exception"]))

    def fail() -> None:
        raise ValueError("boom")

    thread = threading.Thread(
        target=lambda: [box.post(seen.append, 1), box.post(fail), box.post(seen.append, 2)]
    )
    thread.start()
    thread.join()
    await asyncio.sleep(0.05)
    assert seen == [1, 2]
    assert [str(e) for e in errors] == ["boom"]


def test_a_post_after_the_loop_closed_is_dropped() -> None:
    loop = asyncio.new_event_loop()
    box = mailbox_for(loop)
    loop.close()
    box.post(print, "never")  # no exception: nobody waits any more


async def test_driver_coalesces_wakes_and_survives_a_failing_step() -> None:
    steps: list[int] = []
    errors: list[BaseException] = []
    asyncio.get_running_loop().set_exception_handler(
        lambda _loop, context: errors.append(context["exception"])
    )

    def step() -> None:
        steps.append(len(steps))
        if len(steps) == 1:
            raise RuntimeError("first step fails")

    driver = Driver("test", step)
    for _ in range(5):
        driver.wake()
    await asyncio.sleep(0)
    assert steps == [0]  # five wakes before it ran: one step
    driver.wake()
    await asyncio.sleep(0)
    assert steps == [0, 1] and len(errors) == 1
    driver.close()
    driver.wake()
    await asyncio.sleep(0)
    assert steps == [0, 1]


class Meeting(Sleeper):
    """Executes only together with the other instance (a barrier of two)."""

    def __init__(self, name: str, barrier: threading.Barrier) -> None:
        super().__init__(name, 0.0)
        self.barrier = barrier

    def execute(self, inputs: Mapping[str, Any], outputs: Sequence[str]) -> dict[str, Any]:
        self.barrier.wait(timeout=10)  # raises if the other instance never runs meanwhile
        return super().execute(inputs, outputs)


async def test_default_scheduler_threads_share_one_queue_and_start_with_the_first_request() -> None:
    barrier = threading.Barrier(2)
    instances = [Meeting("left", barrier), Meeting("right", barrier)]
    pool = InstancePool([InstanceWorker(i) for i in instances])
    scheduler = DefaultScheduler(pool, ModelStats())
    assert not any(t.name in ("left", "right") for t in threading.enumerate())
    try:
        # Two requests at once: each free instance's thread takes one from the queue.
        await asyncio.gather(scheduler.submit(job()), scheduler.submit(job()))
    finally:
        await scheduler.stop()
    assert [i.threads for i in instances] == [["left"], ["right"]]


async def test_a_caller_leaving_during_execution_counts_when_the_execution_ends() -> None:
    """As Triton: the request counts as the backend ends it (a success here), and as
    cancelled; it is not a CANCELED failure, since it was executed."""
    busy = Sleeper("busy", 0.3)
    stats = ModelStats()
    scheduler = DefaultScheduler(InstancePool([InstanceWorker(busy)]), stats)
    running = asyncio.ensure_future(scheduler.submit(job()))
    assert await asyncio.to_thread(busy.started.wait, 5)
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    assert scheduler.inflight == 0
    await scheduler.stop()  # waits for the execution, which is then recorded
    assert stats.cancelled == 1 and stats.execution_count == 1
    assert stats.success.count == 1 and stats.fail.count == 0
