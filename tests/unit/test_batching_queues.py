"""PriorityQueues (Triton's PriorityQueue) and the dynamic_batching config checks."""

from __future__ import annotations

import asyncio
import time
import tracemalloc

import numpy as np
import pytest

from inference import model_config_pb2 as mc
from service.errors import Unavailable
from service.scheduling.base import Job
from service.scheduling.dynamic.config import prepare_dynamic_batching
from service.scheduling.dynamic.queues import PriorityQueues, QueuePolicy

US = 1000
MS = 1000 * US
T0 = 1_000 * MS
MAX_U64 = 2**64 - 1


def job(name: str = "", priority: int = 0, timeout_us: int = 0, batch: int = 1) -> Job:
    j = Job({"X": np.zeros((batch, 4), np.float32)}, ["Y"], batch, name, priority=priority)
    j.timeout_us = timeout_us
    return j


def names(jobs: object) -> list[str]:
    return [j.request_id for j in jobs]  # type: ignore[attr-defined]


def test_levels_serve_one_first_fifo_within_and_default_for_others() -> None:
    queues = PriorityQueues(levels=3, default_level=2)
    for j in (job("a", 3), job("b", 0), job("c", 1), job("d", 9), job("e", 2)):
        queues.push(j, T0)
    # 0 and out-of-range priorities go to the default level (2), in arrival order.
    assert names(queues) == ["c", "b", "d", "e", "a"]
    assert names(queues.pop(2)) == ["c", "b"]
    assert names(queues) == ["d", "e", "a"] and len(queues) == 3


def test_without_priority_levels_every_request_shares_one_queue() -> None:
    queues = PriorityQueues(levels=0, level_policies={1: QueuePolicy(max_queue_size=1)})
    for j in (job("a", 1), job("b", 7), job("c", 0)):
        queues.push(j, T0)  # per-level policies do not apply without priority_levels
    assert names(queues) == ["a", "b", "c"] and queues.levels_in_use == 1


def test_only_levels_in_use_are_stored() -> None:
    queues = PriorityQueues(
        levels=MAX_U64,
        default_level=2**32,
        level_policies={5: QueuePolicy(max_queue_size=3)},
    )
    assert queues.levels_in_use == 1  # the level with its own policy, kept for good
    queues.push(job("low", 0), T0)  # default level 2**32
    queues.push(job("top", MAX_U64), T0)
    queues.push(job("high", 1), T0)
    assert names(queues) == ["high", "low", "top"] and queues.levels_in_use == 4
    queues.pop(3)
    assert queues.levels_in_use == 1 and len(queues) == 0


def test_max_priority_levels_config_loads_in_bounded_time_and_memory() -> None:
    batching = mc.ModelDynamicBatching(priority_levels=MAX_U64, default_priority_level=2**32)
    batching.priority_queue_policy[MAX_U64].max_queue_size = 1
    tracemalloc.start()
    start = time.monotonic()
    queues = PriorityQueues.from_config(batching)
    for priority in (0, 1, 2**40, MAX_U64):
        queues.push(job(str(priority), priority), T0)
    elapsed = time.monotonic() - start
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 1_000_000 and elapsed < 1.0
    assert names(queues) == ["1", "0", str(2**40), str(MAX_U64)]


def test_a_full_level_refuses_with_unavailable_naming_the_request() -> None:
    queues = PriorityQueues(
        levels=2, default_level=2, level_policies={1: QueuePolicy(max_queue_size=1)}
    )
    queues.push(job("first", 1), T0)
    with pytest.raises(Unavailable) as full:
        queues.push(job("", 1), T0)
    assert full.value.message == "[request id: <id_unknown>] Exceeds maximum queue size"
    with pytest.raises(Unavailable, match=r"^\[request id: r9\] Exceeds maximum queue size$"):
        queues.push(job("r9", 1), T0)
    queues.push(job("other", 2), T0)  # the limit is per level
    assert len(queues) == 2


def test_delayed_requests_count_towards_max_queue_size() -> None:
    policy = QueuePolicy(delay_on_timeout=True, default_timeout_us=100, max_queue_size=2)
    queues = PriorityQueues(default_policy=policy)
    queues.push(job("a"), T0)
    list(queues.scan(T0 + 101 * US))  # "a" moves to the delayed queue
    queues.push(job("b"), T0 + 101 * US)
    with pytest.raises(Unavailable, match="Exceeds maximum queue size"):
        queues.push(job("c"), T0 + 101 * US)


def test_a_request_may_only_shorten_the_timeout() -> None:
    policy = QueuePolicy(default_timeout_us=1_000, allow_timeout_override=True)
    queues = PriorityQueues(default_policy=policy)
    shorter, longer, unset = job(timeout_us=10), job(timeout_us=5_000), job()
    for j in (shorter, longer, unset):
        queues.push(j, T0)
    assert shorter.deadline_ns == T0 + 10 * US
    assert longer.deadline_ns == T0 + 1_000 * US
    assert unset.deadline_ns == T0 + 1_000 * US


def test_an_override_is_ignored_when_not_allowed_or_without_a_default() -> None:
    strict = PriorityQueues(default_policy=QueuePolicy(default_timeout_us=1_000))
    no_default = PriorityQueues(default_policy=QueuePolicy(allow_timeout_override=True))
    a, b = job(timeout_us=10), job(timeout_us=10)
    strict.push(a, T0)
    no_default.push(b, T0)
    assert a.deadline_ns == T0 + 1_000 * US
    assert b.deadline_ns is None and not no_default.has_timeouts


def test_scan_rejects_expired_requests_where_it_reaches_them() -> None:
    queues = PriorityQueues(default_policy=QueuePolicy(default_timeout_us=100))
    queues.push(job("old"), T0)
    queues.push(job("new"), T0 + 50 * US)
    # Exactly at the deadline a request has not expired yet.
    assert names(queues.scan(T0 + 100 * US)) == ["old", "new"]
    assert queues.take_rejected() == []
    scan = queues.scan(T0 + 101 * US)
    assert next(scan).request_id == "new"
    assert names(queues.take_rejected()) == ["old"]
    assert names(queues) == ["new"] and len(queues) == 1


def test_scan_moves_delay_requests_behind_their_level_not_behind_later_levels() -> None:
    delay = QueuePolicy(delay_on_timeout=True, default_timeout_us=100)
    queues = PriorityQueues(levels=2, default_level=2, level_policies={1: delay})
    queues.push(job("late", 1), T0)
    queues.push(job("low", 2), T0)
    queues.push(job("fresh", 1), T0 + 150 * US)
    assert names(queues) == ["late", "fresh", "low"]
    assert names(queues.scan(T0 + 120 * US)) == ["fresh", "late", "low"]
    assert names(queues) == ["fresh", "late", "low"]
    assert queues.take_rejected() == []
    # A delayed request has no deadline any more: it waits for the queue delay only.
    assert [j.deadline_ns for j in queues] == [T0 + 250 * US, None, None]


def test_scan_leaves_requests_it_does_not_reach_in_place() -> None:
    delay = QueuePolicy(
        delay_on_timeout=True, default_timeout_us=1_000, allow_timeout_override=True
    )
    queues = PriorityQueues(default_policy=delay)
    queues.push(job("a"), T0)
    queues.push(job("b", timeout_us=10), T0)
    queues.push(job("c"), T0)
    scan = queues.scan(T0 + 100 * US)
    assert next(scan).request_id == "a"
    # "b" has expired, but the scan stopped before it: it keeps its place and deadline.
    assert names(queues) == ["a", "b", "c"]
    assert [j.deadline_ns for j in queues] == [T0 + 1_000 * US, T0 + 10 * US, T0 + 1_000 * US]
    assert next(scan).request_id == "c"  # reaching "b" moved it behind "c"
    assert names(queues) == ["a", "c", "b"]


def test_reject_expired_removes_only_reject_requests_and_names_the_next_expiry() -> None:
    reject = QueuePolicy(default_timeout_us=100)
    delay = QueuePolicy(delay_on_timeout=True, default_timeout_us=50)
    queues = PriorityQueues(levels=2, default_level=2, level_policies={1: delay, 2: reject})
    queues.push(job("d", 1), T0)
    queues.push(job("r1", 2), T0)
    queues.push(job("r2", 2), T0 + 30 * US)
    assert queues.next_expiry_ns() == T0 + 100 * US + 1
    assert queues.reject_expired(T0 + 100 * US) == []
    assert names(queues.reject_expired(T0 + 100 * US + 1)) == ["r1"]
    assert names(queues) == ["d", "r2"]
    assert queues.next_expiry_ns() == T0 + 130 * US + 1


async def test_drop_done_removes_requests_whose_caller_left() -> None:
    delay = QueuePolicy(delay_on_timeout=True, default_timeout_us=10)
    queues = PriorityQueues(levels=3, default_level=3, level_policies={1: delay})
    loop = asyncio.get_running_loop()
    jobs = [job("gone-delayed", 1), job("kept", 1), job("gone", 1), job("gone-low", 3)]
    for j in jobs:
        j.future = loop.create_future()
    queues.push(jobs[0], T0)
    list(queues.scan(T0 + 11 * US))  # "gone-delayed" is delayed now
    for j in jobs[1:]:
        queues.push(j, T0 + 11 * US)
    for j in (jobs[0], jobs[2], jobs[3]):
        assert j.future is not None
        j.future.cancel()
    assert names(queues.drop_done()) == ["gone", "gone-delayed", "gone-low"]
    assert names(queues) == ["kept"] and len(queues) == 1 and queues.levels_in_use == 1


def test_queues_from_config() -> None:
    batching = mc.ModelDynamicBatching(priority_levels=2, default_priority_level=2)
    batching.default_queue_policy.max_queue_size = 5
    batching.priority_queue_policy[1].timeout_action = mc.ModelQueuePolicy.DELAY
    batching.priority_queue_policy[1].default_timeout_microseconds = 7
    queues = PriorityQueues.from_config(batching)
    assert queues.levels == 2 and queues.default_level == 2 and queues.has_timeouts
    j = job(priority=1)
    queues.push(j, T0)
    assert j.deadline_ns == T0 + 7 * US


# ------------------------------------------------------------- the config, as Triton checks it


def config(max_batch: int = 8, **batching: object) -> mc.ModelConfig:
    cfg = mc.ModelConfig(name="m", max_batch_size=max_batch)
    cfg.dynamic_batching.SetInParent()
    for key, value in batching.items():
        field = getattr(cfg.dynamic_batching, key)
        if isinstance(value, list):
            field.extend(value)
        else:
            setattr(cfg.dynamic_batching, key, value)
    return cfg


def test_missing_preferred_sizes_become_max_batch_size() -> None:
    cfg = config(8)
    prepare_dynamic_batching(cfg)
    assert list(cfg.dynamic_batching.preferred_batch_size) == [8]
    given = config(8, preferred_batch_size=[2, 6])
    prepare_dynamic_batching(given)
    assert list(given.dynamic_batching.preferred_batch_size) == [2, 6]
    unbatched = config(0)
    prepare_dynamic_batching(unbatched)
    assert list(unbatched.dynamic_batching.preferred_batch_size) == []


@pytest.mark.parametrize(
    ("cfg", "message"),
    [
        (
            config(8, preferred_batch_size=[0]),
            "dynamic batching preferred size must be positive for m",
        ),
        (
            config(8, preferred_batch_size=[4, 2**31 - 1]),
            "dynamic batching preferred size must be <= max batch size for m",
        ),
        (
            config(0, preferred_batch_size=[1]),
            "dynamic batching preferred size must be <= max batch size for m",
        ),
        (
            config(8, priority_levels=2),
            "default priority level must be in range [1, 2] for m",
        ),
        (
            config(8, priority_levels=MAX_U64, default_priority_level=0),
            f"default priority level must be in range [1, {MAX_U64}] for m",
        ),
        (
            config(8, priority_levels=3, default_priority_level=4),
            "default priority level must be in range [1, 3] for m",
        ),
        (
            config(8, priority_levels=1, default_priority_level=1, preserve_ordering=True),
            None,
        ),
        (
            config(8, priority_levels=2, default_priority_level=1, preserve_ordering=True),
            "Only one priority level is allowed when 'preserve_ordering' is true for m",
        ),
    ],
)
def test_batching_settings_triton_refuses(cfg: mc.ModelConfig, message: str | None) -> None:
    if message is None:
        prepare_dynamic_batching(cfg)
        return
    with pytest.raises(ValueError) as refused:
        prepare_dynamic_batching(cfg)
    assert str(refused.value) == message


def test_queue_policy_levels_must_be_in_range() -> None:
    cfg = config(8, priority_levels=2, default_priority_level=1)
    cfg.dynamic_batching.priority_queue_policy[3].max_queue_size = 1
    with pytest.raises(ValueError, match=r"^priority queue policy must have priority level in "):
        prepare_dynamic_batching(cfg)


def test_delay_timeouts_conflict_with_preserve_ordering() -> None:
    text = (
        "Queue policy can not have DELAY as timeout action when 'preserve_ordering' is true for m"
    )
    cfg = config(8, preserve_ordering=True)
    cfg.dynamic_batching.default_queue_policy.timeout_action = mc.ModelQueuePolicy.DELAY
    prepare_dynamic_batching(cfg)  # DELAY without a timeout never delays anything
    cfg.dynamic_batching.default_queue_policy.default_timeout_microseconds = 5
    with pytest.raises(ValueError) as refused:
        prepare_dynamic_batching(cfg)
    assert str(refused.value) == text
    per_level = config(8, preserve_ordering=True)
    per_level.dynamic_batching.priority_queue_policy[1].timeout_action = mc.ModelQueuePolicy.DELAY
    per_level.dynamic_batching.priority_queue_policy[1].default_timeout_microseconds = 5
    with pytest.raises(ValueError) as refused:
        prepare_dynamic_batching(per_level)
    assert str(refused.value) == text
