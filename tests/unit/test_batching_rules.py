"""BatchPolicy.decide: Triton's GetDynamicBatch rule, one case per clause, on a fake clock."""

from __future__ import annotations

import numpy as np

from inference import model_config_pb2 as mc
from service.scheduling.base import Job
from service.scheduling.dynamic.policy import BatchPolicy, Decision

US = 1000  # ns per microsecond
MS = 1000 * US
T0 = 1_000 * MS  # the fake clock's start (any value works)


def job(batch: int = 1, width: int = 4, at: int = T0, deadline: int | None = None) -> Job:
    j = Job({"X": np.zeros((batch, width), np.float32)}, ["Y"], batch)
    j.enqueue_ns = at
    j.deadline_ns = deadline
    return j


def jobs(*batches: int, at: int = T0) -> list[Job]:
    return [job(b, at=at) for b in batches]


# Triton's L0_batcher model: preferred [2, 6], max_batch_size 8, 10 s queue delay.
QA = BatchPolicy(max_batch_size=8, preferred=(2, 6), max_queue_delay_ns=10_000 * MS)


def test_any_preferred_size_is_sent_at_once() -> None:
    assert QA.decide(jobs(2), T0) == Decision(take=1)
    assert QA.decide(jobs(1, 1), T0) == Decision(take=2)
    # The longest prefix at a preferred size wins; what follows waits.
    assert QA.decide(jobs(1, 1, 1), T0) == Decision(take=2)
    assert QA.decide(jobs(1, 1, 1, 1, 1, 1, 1), T0) == Decision(take=6)


def test_the_largest_preferred_size_or_more_is_sent_at_once() -> None:
    assert QA.decide(jobs(6), T0) == Decision(take=1)
    assert QA.decide(jobs(7), T0) == Decision(take=1)  # static batch over the largest
    assert QA.decide(jobs(2, 2, 2), T0) == Decision(take=3)


def test_below_every_preferred_size_it_waits_for_the_queue_delay() -> None:
    pending = [job(3, at=T0), job(1, at=T0 + 2_000 * MS)]  # 4: not a preferred size
    assert QA.decide(pending, T0 + 1 * MS) == Decision(wait_until_ns=T0 + 10_000 * MS)
    # The delay counts from the oldest request; at expiry everything pending goes.
    assert QA.decide(pending, T0 + 10_000 * MS) == Decision(take=2)


def test_overflowing_the_largest_preferred_size_sends_the_batch_before_it() -> None:
    # 3 then 4: 3 + 4 > 6, so the 3 goes now and the 4 waits alone (qa sum_gt_max_preferred).
    assert QA.decide(jobs(3, 4), T0) == Decision(take=1)
    assert QA.decide(jobs(4), T0) == Decision(wait_until_ns=T0 + 10_000 * MS)


def test_a_request_that_would_overflow_max_batch_size_closes_the_batch() -> None:
    policy = BatchPolicy(max_batch_size=6, preferred=(2, 4), max_queue_delay_ns=10_000 * MS)
    # 1+1 = 2 is marked; 1+1+3 = 5 fits; the next 3 would make 8 > 6: send the marked 2.
    assert policy.decide(jobs(1, 1, 3, 3), T0) == Decision(take=2)
    # Once the delay is exceeded the whole closed batch goes, not just the marked prefix.
    assert policy.decide(jobs(1, 1, 3, 3), T0 + 10_000 * MS) == Decision(take=3)


def test_delay_expiry_sends_everything_pending_even_past_a_preferred_size() -> None:
    # qa test_multi_batch_delayed_use_max_batch: 3, 4 and 1 queued 11 s -> one batch of 8.
    assert QA.decide(jobs(3, 4, 1), T0 + 11_000 * MS) == Decision(take=3)
    assert QA.decide(jobs(1, 1, 1), T0 + 10_000 * MS) == Decision(take=3)


def test_without_preferred_sizes_max_batch_size_is_the_preferred_size() -> None:
    policy = BatchPolicy(max_batch_size=4, max_queue_delay_ns=100 * MS)
    assert policy.decide(jobs(1, 1, 1), T0) == Decision(wait_until_ns=T0 + 100 * MS)
    assert policy.decide(jobs(1, 1, 1, 1), T0) == Decision(take=4)
    assert policy.decide(jobs(1, 1, 1, 1, 1, 1), T0) == Decision(take=4)
    assert policy.decide(jobs(3, 3), T0) == Decision(take=1)


def test_no_queue_delay_sends_the_best_batch_now() -> None:
    # qa batcher_preferred_only: preferred [4, 6], no max_queue_delay.
    policy = BatchPolicy(max_batch_size=8, preferred=(4, 6))
    assert policy.decide(jobs(1, 1, 1, 1), T0) == Decision(take=4)
    assert policy.decide(jobs(1, 1, 1, 1, 1), T0) == Decision(take=4)
    assert policy.decide(jobs(1, 1, 1, 1, 1, 1, 1), T0) == Decision(take=6)
    assert policy.decide(jobs(1, 1, 1), T0) == Decision(take=3)


def test_a_shape_mismatch_closes_the_batch() -> None:
    pending = [job(width=4), job(width=4), job(width=5), job(width=4)]
    assert QA.decide(pending, T0) == Decision(take=2)  # 2 is preferred anyway
    policy = BatchPolicy(max_batch_size=8, preferred=(8,), max_queue_delay_ns=10_000 * MS)
    # Not a preferred size, but the batch cannot grow: it goes now.
    assert policy.decide([job(width=4), job(width=5)], T0) == Decision(take=1)


def test_ragged_inputs_may_differ_in_shape() -> None:
    policy = BatchPolicy(8, (2,), 10_000 * MS, ragged=frozenset({"X"}))
    assert policy.decide([job(width=4), job(width=5)], T0) == Decision(take=2)


def test_the_closest_request_timeout_shortens_the_wait() -> None:
    pending = [job(1, deadline=T0 + 300 * MS)]
    # Look again at the first instant the request has expired (the scan then applies it).
    assert QA.decide(pending, T0 + 100 * MS) == Decision(wait_until_ns=T0 + 300 * MS + 1)
    # A timeout later than the queue delay does not matter.
    late = [job(1, deadline=T0 + 20_000 * MS)]
    assert QA.decide(late, T0) == Decision(wait_until_ns=T0 + 10_000 * MS)


def test_less_than_a_microsecond_left_counts_as_none() -> None:
    # Triton waits in whole microseconds: 999 ns left rounds to 0, and 0 means "send now".
    pending = jobs(1)
    assert QA.decide(pending, T0 + 10_000 * MS - 999) == Decision(take=1)
    assert QA.decide(pending, T0 + 10_000 * MS - 1000) == Decision(wait_until_ns=T0 + 10_000 * MS)
    # The same for a timeout that falls due within the microsecond.
    closing = [job(1, deadline=T0 + 500)]
    assert QA.decide(closing, T0) == Decision(take=1)
    # Fractions of a microsecond are dropped from the delay's wait, as Triton's division does.
    assert QA.decide(pending, T0 + 1500) == Decision(wait_until_ns=T0 + 10_000 * MS - 500)


def test_nothing_pending_means_nothing_to_do() -> None:
    assert QA.decide([], T0) == Decision()


def test_policy_from_config_uses_the_preferred_sizes_as_a_set() -> None:
    config = mc.ModelConfig(max_batch_size=8)
    config.dynamic_batching.preferred_batch_size.extend([4, 2, 4])
    config.dynamic_batching.max_queue_delay_microseconds = 250
    assert BatchPolicy.from_config(config) == BatchPolicy(8, (2, 4), 250 * US)
    unbatched = mc.ModelConfig(max_batch_size=0)
    unbatched.dynamic_batching.SetInParent()
    # max_batch_size 0: batches of one, as Triton's batcher runs such a model.
    assert BatchPolicy.from_config(unbatched).decide(jobs(1, 1), T0) == Decision(take=1)


def test_a_huge_queue_delay_is_just_a_long_wait() -> None:
    policy = BatchPolicy(8, (4,), (2**64 - 1) * 1000)
    decision = policy.decide(jobs(1), T0)
    assert decision.take == 0 and decision.wait_until_ns is not None
    assert decision.wait_until_ns > T0 + 10**20
