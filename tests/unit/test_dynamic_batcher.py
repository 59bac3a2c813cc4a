"""DynamicBatchScheduler and DefaultScheduler driven with fake instances on a real loop."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pytest
from executed import executed_rows

from inference import model_config_pb2 as mc
from service.backends.base import InstanceSpec
from service.errors import Internal, Unavailable
from service.scheduling.base import Job
from service.scheduling.default import DefaultScheduler
from service.scheduling.dynamic.batcher import DynamicBatchScheduler
from service.scheduling.dynamic.drain import DrainBatchScheduler
from service.scheduling.factory import create_scheduler
from service.scheduling.instances import InstancePool, InstanceWorker
from service.statistics import ModelStats


class Doubler:
    """Y = 2 * X; records every batch it executes; may sleep or fail on demand."""

    def __init__(self, name: str = "fake_0", delay: float = 0.0) -> None:
        self.spec = InstanceSpec(name, "KIND_CPU", 0, 1)
        self.delay = delay
        self.batches: list[int] = []
        self.fail = False
        self.started = threading.Event()
        self.gate: threading.Event | None = None  # when set: executions wait for it

    def signature(self) -> Any:
        raise NotImplementedError

    def execute(self, inputs: Mapping[str, Any], outputs: Sequence[str]) -> dict[str, Any]:
        self.started.set()
        if self.gate is not None:
            self.gate.wait(30)
        self.batches.append(len(inputs["X"]))
        if self.delay:  # no sleep(0): its GIL hand-off would be most of a fast run
            time.sleep(self.delay)
        if self.fail:
            raise Internal("onnx runtime error: boom")
        return {"Y": inputs["X"] * 2, "Z": inputs["X"] + 1}

    def close(self) -> None:
        pass


def config(max_batch: int = 64, **batching: Any) -> mc.ModelConfig:
    cfg = mc.ModelConfig(name="m", max_batch_size=max_batch)
    cfg.dynamic_batching.SetInParent()
    for key, value in batching.items():
        field = getattr(cfg.dynamic_batching, key)
        if isinstance(value, list):
            field.extend(value)
        else:
            setattr(cfg.dynamic_batching, key, value)
    return cfg


def make(instances: Sequence[Doubler], **kwargs: Any) -> tuple[DynamicBatchScheduler, ModelStats]:
    stats = ModelStats()
    pool = InstancePool([InstanceWorker(i) for i in instances])
    delay_count = kwargs.pop("delay_count", 0)
    return DynamicBatchScheduler(config(**kwargs), pool, stats, delay_count=delay_count), stats


def request(value: float, batch: int = 1, outputs: Sequence[str] = ("Y",)) -> Job:
    return Job({"X": np.full((batch, 3), value, np.float32)}, list(outputs), batch)


async def test_64_requests_become_one_execution_and_each_gets_its_own_rows() -> None:
    fake = Doubler()
    scheduler, stats = make([fake], delay_count=64)
    results = await asyncio.gather(*(scheduler.submit(request(i)) for i in range(64)))
    assert fake.batches == [64]
    for i, result in enumerate(results):
        np.testing.assert_array_equal(result.outputs["Y"], np.full((1, 3), 2 * i, np.float32))
    assert (stats.execution_count, executed_rows(stats)) == (1, 64)
    assert stats.batches[64].compute_infer.count == 1
    await scheduler.stop()


async def test_requests_wait_for_the_queue_delay_to_form_a_batch() -> None:
    fake = Doubler()
    scheduler, _ = make([fake], max_queue_delay_microseconds=200_000)
    first = asyncio.create_task(scheduler.submit(request(1)))
    await asyncio.sleep(0.05)
    second = asyncio.create_task(scheduler.submit(request(2)))
    done = await asyncio.gather(first, second)
    assert fake.batches == [2]
    assert done[0].queue_ns >= 150_000_000
    await scheduler.stop()


async def test_each_caller_gets_only_the_outputs_it_asked_for() -> None:
    fake = Doubler()
    scheduler, _ = make([fake], delay_count=2)
    a, b = await asyncio.gather(
        scheduler.submit(request(1, outputs=["Y"])),
        scheduler.submit(request(1, batch=2, outputs=["Z"])),
    )
    assert fake.batches == [3]
    assert set(a.outputs) == {"Y"} and a.outputs["Y"].shape == (1, 3)
    assert set(b.outputs) == {"Z"} and b.outputs["Z"].shape == (2, 3)
    await scheduler.stop()


async def test_preserve_ordering_returns_results_in_arrival_order() -> None:
    slow, fast = Doubler("slow_0", delay=0.3), Doubler("fast_0")
    scheduler, _ = make([slow, fast], max_batch=1, preserve_ordering=True)
    finished: list[int] = []

    async def call(i: int) -> None:
        await scheduler.submit(request(i))
        finished.append(i)

    first = asyncio.create_task(call(0))
    await asyncio.sleep(0.05)  # request 0 is on the slow instance now
    await asyncio.gather(first, call(1))
    assert slow.batches == [1] and fast.batches == [1]
    assert finished == [0, 1]
    await scheduler.stop()


async def test_without_preserve_ordering_fast_results_go_first() -> None:
    slow, fast = Doubler("slow_0", delay=0.3), Doubler("fast_0")
    scheduler, _ = make([slow, fast], max_batch=1)
    finished: list[int] = []

    async def call(i: int) -> None:
        await scheduler.submit(request(i))
        finished.append(i)

    first = asyncio.create_task(call(0))
    await asyncio.sleep(0.05)
    await asyncio.gather(first, call(1))
    assert finished == [1, 0]
    await scheduler.stop()


async def test_a_cancelled_request_is_removed_before_execution_and_counted() -> None:
    busy = Doubler(delay=0.3)
    scheduler, stats = make([busy], max_batch=1)
    running = asyncio.create_task(scheduler.submit(request(1)))
    await asyncio.sleep(0.05)
    queued = asyncio.create_task(scheduler.submit(request(2)))
    await asyncio.sleep(0.01)
    queued.cancel()
    await running
    with pytest.raises(asyncio.CancelledError):
        await queued
    await asyncio.sleep(0.05)
    assert busy.batches == [1]
    assert stats.cancelled == 1
    assert (stats.execution_count, executed_rows(stats)) == (1, 1)
    await scheduler.stop()


async def test_deadline_while_queued_counts_as_cancelled() -> None:
    busy = Doubler(delay=0.3)
    scheduler, stats = make([busy], max_batch=1)
    running = asyncio.create_task(scheduler.submit(request(1)))
    await asyncio.sleep(0.05)
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(scheduler.submit(request(2)), timeout=0.05)
    await running
    await asyncio.sleep(0.05)
    assert busy.batches == [1] and stats.cancelled == 1
    await scheduler.stop()


async def test_queue_full_is_unavailable_with_the_request_id() -> None:
    busy = Doubler()
    busy.gate = threading.Event()  # the first request holds the only instance until opened
    cfg = config(max_batch=1)
    cfg.dynamic_batching.default_queue_policy.max_queue_size = 1
    scheduler = DynamicBatchScheduler(
        cfg, InstancePool([InstanceWorker(busy)]), ModelStats(), delay_count=0
    )
    running = asyncio.create_task(scheduler.submit(request(1)))
    assert await asyncio.to_thread(busy.started.wait, 30)
    waiting = asyncio.create_task(scheduler.submit(request(2)))
    await asyncio.sleep(0)  # queued: the queue is now full
    try:
        with pytest.raises(Unavailable) as full:
            await scheduler.submit(request(3))
        assert full.value.message == "[request id: <id_unknown>] Exceeds maximum queue size"
        named = request(4)
        named.request_id = "r4"
        with pytest.raises(Unavailable, match=r"^\[request id: r4\] Exceeds maximum queue size$"):
            await scheduler.submit(named)
    finally:
        busy.gate.set()
    await asyncio.gather(running, waiting)
    await scheduler.stop()


async def test_timeout_reject_fails_the_queued_request() -> None:
    busy = Doubler(delay=0.3)
    cfg = config(max_batch=1)
    cfg.dynamic_batching.default_queue_policy.default_timeout_microseconds = 50_000
    scheduler = DynamicBatchScheduler(
        cfg, InstancePool([InstanceWorker(busy)]), ModelStats(), delay_count=0
    )
    running = asyncio.create_task(scheduler.submit(request(1)))
    await asyncio.sleep(0.02)
    with pytest.raises(Unavailable, match=r"^Request timeout expired$") as rejected:
        await scheduler.submit(request(2))
    assert rejected.value.failure == "REJECTED"  # Triton's failure reason
    await running
    assert busy.batches == [1]
    await scheduler.stop()


async def test_timeout_delay_still_executes_the_request() -> None:
    busy = Doubler(delay=0.2)
    cfg = config(max_batch=1)
    policy = cfg.dynamic_batching.default_queue_policy
    policy.default_timeout_microseconds = 10_000
    policy.timeout_action = mc.ModelQueuePolicy.DELAY
    scheduler = DynamicBatchScheduler(
        cfg, InstancePool([InstanceWorker(busy)]), ModelStats(), delay_count=0
    )
    results = await asyncio.gather(scheduler.submit(request(1)), scheduler.submit(request(2)))
    assert [float(r.outputs["Y"][0, 0]) for r in results] == [2.0, 4.0]
    await scheduler.stop()


async def test_execution_failure_reaches_every_caller_in_the_batch() -> None:
    broken = Doubler()
    broken.fail = True
    scheduler, stats = make([broken], delay_count=2)
    results = await asyncio.gather(
        scheduler.submit(request(1)), scheduler.submit(request(2)), return_exceptions=True
    )
    assert all(isinstance(r, Internal) and "boom" in r.message for r in results)
    assert stats.execution_count == 0
    await scheduler.stop()


async def test_priority_one_jumps_the_queue() -> None:
    busy = Doubler(delay=0.1)
    cfg = config(max_batch=1, priority_levels=2, default_priority_level=2)
    scheduler = DynamicBatchScheduler(
        cfg, InstancePool([InstanceWorker(busy)]), ModelStats(), delay_count=0
    )
    order: list[float] = []

    async def call(value: float, priority: int) -> None:
        job = request(value)
        job.priority = priority
        await scheduler.submit(job)
        order.append(value)

    first = asyncio.create_task(call(0, 2))
    await asyncio.sleep(0.02)
    await asyncio.gather(first, call(1, 2), call(2, 2), call(3, 1))
    assert order == [0, 3, 1, 2]
    await scheduler.stop()


async def test_event_loop_keeps_running_during_execution() -> None:
    scheduler, _ = make([Doubler(delay=0.2)], max_batch=1)
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    tick_task = asyncio.create_task(ticker())
    await scheduler.submit(request(1))
    tick_task.cancel()
    assert ticks >= 10
    await scheduler.stop()


async def test_default_scheduler_runs_n_instances_in_parallel() -> None:
    fakes = [Doubler(f"f_{i}", delay=0.2) for i in range(3)]
    stats = ModelStats()
    scheduler = DefaultScheduler(InstancePool([InstanceWorker(f) for f in fakes]), stats)
    start = time.monotonic()
    await asyncio.gather(*(scheduler.submit(request(i)) for i in range(3)))
    parallel = time.monotonic() - start
    assert all(f.batches == [1] for f in fakes)
    assert parallel < 0.35  # three 0.2 s executions overlapped
    # Request N+1 waits for the first free instance.
    start = time.monotonic()
    await asyncio.gather(*(scheduler.submit(request(i)) for i in range(4)))
    assert time.monotonic() - start >= 0.38
    assert (stats.execution_count, executed_rows(stats)) == (7, 7)
    await scheduler.stop()


async def test_default_scheduler_counts_requests_cancelled_while_waiting() -> None:
    # Long enough that a stalled loop (busy machine) still times out the second request
    # before the instance's thread is free to take it.
    busy = Doubler(delay=0.5)
    stats = ModelStats()
    scheduler = DefaultScheduler(InstancePool([InstanceWorker(busy)]), stats)
    running = asyncio.create_task(scheduler.submit(request(1)))
    assert await asyncio.to_thread(busy.started.wait, 5)
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(scheduler.submit(request(2)), timeout=0.05)
    await running
    assert busy.batches == [1] and stats.cancelled == 1
    await scheduler.stop()


async def test_a_rejected_request_fails_at_once_even_with_preserve_ordering() -> None:
    busy = Doubler()
    busy.gate = threading.Event()
    cfg = config(max_batch=1, preserve_ordering=True)
    cfg.dynamic_batching.default_queue_policy.default_timeout_microseconds = 50_000
    scheduler = DynamicBatchScheduler(
        cfg, InstancePool([InstanceWorker(busy)]), ModelStats(), delay_count=0
    )
    running = asyncio.create_task(scheduler.submit(request(1)))
    await asyncio.to_thread(busy.started.wait)
    with pytest.raises(Unavailable, match=r"^Request timeout expired$"):
        await scheduler.submit(request(2))
    # Triton answers a rejection directly, not through the ordered response queue.
    assert not running.done()
    busy.gate.set()
    await running
    await scheduler.stop()


async def test_a_delayed_request_runs_after_its_level_but_before_lower_levels() -> None:
    busy = Doubler()
    gate = threading.Event()
    busy.gate = gate
    cfg = config(max_batch=1, priority_levels=2, default_priority_level=2)
    policy = cfg.dynamic_batching.priority_queue_policy[1]
    policy.timeout_action = mc.ModelQueuePolicy.DELAY
    policy.default_timeout_microseconds = 50_000
    now = [10**12]
    scheduler = DynamicBatchScheduler(
        cfg, InstancePool([InstanceWorker(busy)]), ModelStats(), lambda: now[0], delay_count=0
    )
    order: list[float] = []

    async def call(value: float, priority: int) -> None:
        job = request(value)
        job.priority = priority
        await scheduler.submit(job)
        order.append(value)

    first = asyncio.create_task(call(0, 2))
    await asyncio.to_thread(busy.started.wait)  # executing, held at the gate
    late, low = asyncio.create_task(call(1, 1)), asyncio.create_task(call(2, 2))
    await asyncio.sleep(0)
    now[0] += 60_000_000  # "late" is past its 50 ms timeout; DELAY applies at the next scan
    fresh = asyncio.create_task(call(3, 1))
    await asyncio.sleep(0)
    gate.set()
    await asyncio.gather(first, late, low, fresh)
    assert order == [0, 3, 1, 2]
    await scheduler.stop()


async def test_factory_checks_and_completes_the_batching_config() -> None:
    pool = InstancePool([InstanceWorker(Doubler())])
    cfg = config(max_batch=8)
    scheduler = create_scheduler(cfg, pool, ModelStats())
    assert isinstance(scheduler, DrainBatchScheduler)  # the plain rule (test_drain_batcher)
    assert list(cfg.dynamic_batching.preferred_batch_size) == [8]  # as Triton reports it
    await scheduler.stop()
    bad = config(max_batch=8, preferred_batch_size=[16])
    with pytest.raises(ValueError, match="preferred size must be <= max batch size for m"):
        create_scheduler(bad, InstancePool([InstanceWorker(Doubler())]), ModelStats())


async def test_max_batch_size_zero_keeps_priorities_with_batches_of_one() -> None:
    busy = Doubler()
    busy.gate = threading.Event()
    cfg = config(max_batch=0, priority_levels=2, default_priority_level=2)
    scheduler = create_scheduler(cfg, InstancePool([InstanceWorker(busy)]), ModelStats())
    assert isinstance(scheduler, DynamicBatchScheduler)
    order: list[float] = []

    async def call(value: float, priority: int) -> None:
        job = Job({"X": np.full((3,), value, np.float32)}, ["Y"], 0, priority=priority)
        result = await scheduler.submit(job)
        assert result.outputs["Y"].shape == (3,)
        order.append(value)

    first = asyncio.create_task(call(0, 2))
    await asyncio.to_thread(busy.started.wait)
    later = [asyncio.create_task(call(1, 2)), asyncio.create_task(call(2, 1))]
    await asyncio.sleep(0.01)  # both queued behind the held execution
    busy.gate.set()
    await asyncio.gather(first, *later)
    assert order == [0, 2, 1] and busy.batches == [3, 3, 3]
    await scheduler.stop()


async def test_huge_numeric_batcher_fields_load_and_serve() -> None:
    cfg = config(
        max_batch=4,
        priority_levels=2**64 - 1,
        default_priority_level=2**32,
        max_queue_delay_microseconds=2**64 - 1,
    )
    policy = cfg.dynamic_batching.default_queue_policy
    policy.max_queue_size = 2**32 - 1
    policy.default_timeout_microseconds = 2**64 - 1
    policy.allow_timeout_override = True
    fake = Doubler()
    start = time.monotonic()
    scheduler = create_scheduler(cfg, InstancePool([InstanceWorker(fake)]), ModelStats())
    assert time.monotonic() - start < 1.0
    jobs = [request(i) for i in range(4)]
    for i, job in enumerate(jobs):
        job.priority = [0, 1, 2**40, 2**64 - 1][i]
        job.timeout_us = 2**64 - 1
    # The first request arms a timer for the (practically endless) queue delay; the fourth
    # reaches the preferred size (max_batch_size) and all four go at once.
    first = asyncio.create_task(scheduler.submit(jobs[0]))
    await asyncio.sleep(0.02)
    results = await asyncio.gather(first, *(scheduler.submit(j) for j in jobs[1:]))
    assert fake.batches == [4]
    assert [float(r.outputs["Y"][0, 0]) for r in results] == [0.0, 2.0, 4.0, 6.0]
    await scheduler.stop()


class RequestEcho:
    """A request backend (as Python models are): Y = X per request; records each call."""

    def __init__(self) -> None:
        self.spec = InstanceSpec("echo_0", "KIND_CPU", 0, 1)
        self.calls: list[list[tuple[int, ...]]] = []

    def signature(self) -> None:
        return None

    def execute_requests(self, requests: Sequence[Any], senders: Sequence[Any]) -> None:
        self.calls.append([tuple(r.inputs["X"].shape) for r in requests])
        for request, sender in zip(requests, senders, strict=True):
            sender.send({"Y": request.inputs["X"]}, final=True)

    def close(self) -> None:
        pass


def ragged_config(ragged: bool) -> mc.ModelConfig:
    cfg = config(max_batch=8)
    cfg.input.add(name="X", data_type=mc.TYPE_FP32, dims=[-1], allow_ragged_batch=ragged)
    return cfg


@pytest.mark.parametrize("ragged", [True, False])
async def test_ragged_inputs_share_a_batch_on_request_backends(ragged: bool) -> None:
    echo = RequestEcho()
    scheduler = DynamicBatchScheduler(
        ragged_config(ragged), InstancePool([InstanceWorker(echo)]), ModelStats(), delay_count=2
    )
    narrow = Job({"X": np.zeros((1, 3), np.float32)}, ["Y"], 1)
    wide = Job({"X": np.zeros((1, 5), np.float32)}, ["Y"], 1)
    await asyncio.gather(scheduler.submit(narrow), scheduler.submit(wide))
    # Triton enforces equal shapes only for variable-size inputs that are not ragged.
    assert echo.calls == ([[(1, 3), (1, 5)]] if ragged else [[(1, 3)], [(1, 5)]])
    await scheduler.stop()


@pytest.mark.parametrize("ragged", [True, False])
async def test_tensor_backends_get_ragged_inputs_flat_in_one_batch(ragged: bool) -> None:
    fake = Doubler()
    scheduler = DynamicBatchScheduler(
        ragged_config(ragged), InstancePool([InstanceWorker(fake)]), ModelStats(), delay_count=2
    )
    narrow = Job({"X": np.zeros((1, 3), np.float32)}, ["Y"], 1)
    wide = Job({"X": np.zeros((1, 5), np.float32)}, ["Y"], 1)
    await asyncio.gather(scheduler.submit(narrow), scheduler.submit(wide))
    # Ragged: one batch, X as one vector of 3 + 5 elements (Triton's ORT backend); else
    # one merged tensor needs equal shapes.
    assert fake.batches == ([8] if ragged else [1, 1])


# --- callers that go away: every request that reached the backend is counted ----------------


def _outcome(stats: ModelStats) -> tuple[int, int, int, int]:
    return stats.success.count, stats.fail.count, stats.cancelled, stats.execution_count


def _default(instance: Doubler) -> tuple[DefaultScheduler, ModelStats]:
    stats = ModelStats()
    return DefaultScheduler(InstancePool([InstanceWorker(instance)]), stats), stats


@pytest.mark.parametrize("kind", ["dynamic", "default"])
@pytest.mark.parametrize("fails", [False, True], ids=["succeeds", "fails"])
async def test_a_request_cancelled_while_executing_counts_when_the_backend_finishes(
    kind: str, fails: bool
) -> None:
    """Triton records a request when the backend finishes, whatever the client did."""
    busy = Doubler(delay=0.2)
    busy.fail = fails
    scheduler, stats = make([busy], max_batch=1) if kind == "dynamic" else _default(busy)
    caller = asyncio.create_task(scheduler.submit(request(1)))
    await asyncio.to_thread(busy.started.wait, 5)
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller
    assert _outcome(stats) == (0, 0, 0, 0)  # still running
    await scheduler.stop()  # waits for the execution
    await asyncio.sleep(0.01)
    assert _outcome(stats) == ((0, 1, 1, 0) if fails else (1, 0, 1, 1))
    if fails:
        assert stats.responses[0].fail.count == 1  # the backend's failure, as Triton shows it


@pytest.mark.parametrize("kind", ["dynamic", "default"])
async def test_a_request_cancelled_while_queued_is_a_cancelled_failure(kind: str) -> None:
    """Triton: a request dropped before execution fails with reason CANCELED."""
    busy = Doubler(delay=0.2)
    scheduler, stats = make([busy], max_batch=1) if kind == "dynamic" else _default(busy)
    running = asyncio.create_task(scheduler.submit(request(1)))
    await asyncio.to_thread(busy.started.wait, 5)
    queued = asyncio.create_task(scheduler.submit(request(2)))
    await asyncio.sleep(0.01)
    queued.cancel()
    await running
    await asyncio.gather(queued, return_exceptions=True)
    await asyncio.sleep(0.01)
    assert busy.batches == [1]
    # The running request's success is the core's to record: its caller got the answer.
    assert _outcome(stats) == (0, 1, 1, 1)
    await scheduler.stop()


@pytest.mark.parametrize("kind", ["dynamic", "default"])
async def test_an_answer_that_arrives_as_its_caller_is_cancelled_is_counted(
    kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The race: the result is set, then the caller is cancelled before it wakes up to
    take it. The result reaches nobody, so the scheduler counts it."""
    fake = Doubler()
    scheduler, stats = make([fake], max_batch=1) if kind == "dynamic" else _default(fake)
    callers: list[asyncio.Task[Any]] = []
    if kind == "dynamic":
        finished = scheduler._finished  # type: ignore[union-attr]

        def finished_then_cancel(*args: Any) -> None:
            finished(*args)  # the result is set on the caller's future...
            callers[0].cancel()  # ...which is cancelled before it wakes up

        monkeypatch.setattr(scheduler, "_finished", finished_then_cancel)
    else:
        make_deliver = scheduler._deliver  # type: ignore[union-attr]

        def deliver_then_cancel(job: Job) -> Any:
            deliver = make_deliver(job)

            def then_cancel(outcome: Any, error: Any) -> None:
                deliver(outcome, error)
                callers[0].cancel()

            return then_cancel

        monkeypatch.setattr(scheduler, "_deliver", deliver_then_cancel)
    callers.append(asyncio.create_task(scheduler.submit(request(1))))
    with pytest.raises(asyncio.CancelledError):
        await callers[0]
    await asyncio.sleep(0.01)
    assert _outcome(stats) == (1, 0, 1, 1)
    await scheduler.stop()
