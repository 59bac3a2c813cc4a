"""The dynamic batcher's pure rules (BatchPolicy, PriorityQueues) driven by a fake clock."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from inference import model_config_pb2 as mc
from service.errors import ResourceExhausted
from service.scheduling.base import Job
from service.scheduling.policy import BatchPolicy, Decision
from service.scheduling.queues import PriorityQueues, QueuePolicy

US = 1000  # ns per microsecond


def job(batch: int = 1, width: int = 4, at: int = 0, priority: int = 0, timeout_us: int = 0) -> Job:
    j = Job({"X": np.zeros((batch, width), np.float32)}, ["Y"], batch, priority=priority)
    j.timeout_us = timeout_us
    j.enqueue_ns = at
    return j


def test_waits_for_the_queue_delay_then_sends_what_it_has() -> None:
    policy = BatchPolicy(max_batch_size=8, max_queue_delay_ns=100 * US)
    pending = [job(at=0), job(at=10 * US), job(at=20 * US)]
    assert policy.decide(pending, now_ns=50 * US) == Decision(wait_until_ns=100 * US)
    assert policy.decide(pending, now_ns=100 * US) == Decision(take=3)


def test_max_batch_size_reached_sends_at_once() -> None:
    policy = BatchPolicy(max_batch_size=4, max_queue_delay_ns=1_000 * US)
    pending = [job() for _ in range(6)]
    assert policy.decide(pending, now_ns=0) == Decision(take=4)


def test_largest_preferred_size_sends_at_once() -> None:
    policy = BatchPolicy(max_batch_size=16, preferred=(2, 4), max_queue_delay_ns=1_000 * US)
    assert policy.decide([job() for _ in range(4)], now_ns=0) == Decision(take=4)
    # Below the largest preferred size it waits...
    assert policy.decide([job() for _ in range(3)], now_ns=0).take == 0


def test_on_delay_expiry_the_longest_preferred_prefix_is_sent() -> None:
    policy = BatchPolicy(max_batch_size=16, preferred=(2, 4), max_queue_delay_ns=100 * US)
    pending = [job(), job(), job()]
    assert policy.decide(pending, now_ns=100 * US) == Decision(take=2)


def test_no_delay_sends_whatever_is_queued() -> None:
    policy = BatchPolicy(max_batch_size=8)
    assert policy.decide([job(), job()], now_ns=0) == Decision(take=2)


def test_different_shapes_never_share_a_batch() -> None:
    policy = BatchPolicy(max_batch_size=8, max_queue_delay_ns=1_000 * US)
    pending = [job(width=4), job(width=4), job(width=5), job(width=4)]
    # The candidate cannot grow past the odd one out, so it goes now.
    assert policy.decide(pending, now_ns=0) == Decision(take=2)


def test_a_request_that_would_overflow_closes_the_batch() -> None:
    policy = BatchPolicy(max_batch_size=6, max_queue_delay_ns=1_000 * US)
    assert policy.decide([job(batch=4), job(batch=4)], now_ns=0) == Decision(take=1)


def test_delay_counts_from_the_oldest_request() -> None:
    policy = BatchPolicy(max_batch_size=8, max_queue_delay_ns=100 * US)
    pending = [job(at=50 * US, priority=1), job(at=0)]
    assert policy.decide(pending, now_ns=60 * US) == Decision(wait_until_ns=100 * US)


def test_policy_from_config() -> None:
    config = mc.ModelConfig(max_batch_size=8)
    config.dynamic_batching.preferred_batch_size.extend([4, 2, 32])
    config.dynamic_batching.max_queue_delay_microseconds = 250
    assert BatchPolicy.from_config(config) == BatchPolicy(8, (2, 4), 250 * US)


def test_priority_levels_serve_level_one_first_and_fifo_within() -> None:
    queues = PriorityQueues(levels=3, default_level=2)
    a, b, c, d = job(priority=3), job(priority=0), job(priority=1), job(priority=9)
    for j in (a, b, c, d):
        queues.push(j, now_ns=0)
    # 0 and out-of-range priorities use the default level (2).
    assert list(queues) == [c, b, d, a]
    assert queues.pop(2) == [c, b]
    assert list(queues) == [d, a]


def test_max_queue_size_refuses_with_resource_exhausted() -> None:
    queues = PriorityQueues(default_policy=QueuePolicy(max_queue_size=2))
    queues.push(job(), 0)
    queues.push(job(), 0)
    with pytest.raises(ResourceExhausted, match="Exceeds maximum queue size"):
        queues.push(job(), 0)


def test_timeout_reject_removes_the_request() -> None:
    queues = PriorityQueues(default_policy=QueuePolicy(default_timeout_us=100))
    old, new = job(), job()
    queues.push(old, now_ns=0)
    queues.push(new, now_ns=50 * US)
    assert queues.next_deadline() == 100 * US
    assert queues.expire(now_ns=100 * US) == [old]
    assert list(queues) == [new]


def test_timeout_delay_moves_the_request_behind_all_others() -> None:
    policy = QueuePolicy(delay_on_timeout=True, default_timeout_us=100)
    queues = PriorityQueues(levels=2, default_level=1, level_policies={1: policy})
    late, fresh, low = job(priority=1), job(priority=1), job(priority=2)
    queues.push(late, 0)
    queues.push(low, 0)
    queues.push(fresh, 150 * US)
    assert queues.expire(now_ns=120 * US) == []
    assert list(queues) == [fresh, low, late]


def test_request_timeout_overrides_only_when_allowed() -> None:
    allowed = PriorityQueues(
        default_policy=QueuePolicy(default_timeout_us=1_000, allow_timeout_override=True)
    )
    strict = PriorityQueues(default_policy=QueuePolicy(default_timeout_us=1_000))
    a, b = job(timeout_us=10), job(timeout_us=10)
    allowed.push(a, 0)
    strict.push(b, 0)
    assert a.deadline_ns == 10 * US
    assert b.deadline_ns == 1_000 * US


async def test_cancelled_requests_are_dropped() -> None:
    queues = PriorityQueues()
    loop = asyncio.get_running_loop()
    kept, gone = job(), job()
    for j in (kept, gone):
        j.future = loop.create_future()
        queues.push(j, 0)
    assert gone.future is not None
    gone.future.cancel()
    assert queues.drop_done() == [gone]
    assert list(queues) == [kept]


def test_queues_from_config() -> None:
    batching = mc.ModelDynamicBatching(priority_levels=2, default_priority_level=2)
    batching.default_queue_policy.max_queue_size = 5
    batching.priority_queue_policy[1].timeout_action = mc.ModelQueuePolicy.DELAY
    batching.priority_queue_policy[1].default_timeout_microseconds = 7
    queues = PriorityQueues.from_config(batching)
    assert queues.levels == 2 and queues.default_level == 2
    assert queues.has_timeouts
    j = job(priority=1)
    queues.push(j, 0)
    assert j.deadline_ns == 7 * US
