"""Triton's own L0_batcher / L0_model_queue scenarios replayed through the pure rules.

``OneInstance`` runs the dynamic batcher's step as ``DynamicBatchScheduler._step`` does
(reject expired REJECT requests, then decide over a policy-applying scan while the instance
is free, then wake at the decision's time or the next expiry) on a fake clock, with one
instance that is busy for a fixed time per batch. Each test states, in the qa test's own
terms, which batches leave when; timings here are exact, not measured.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from inference import model_config_pb2 as mc
from service.errors import Unavailable
from service.scheduling.base import Job
from service.scheduling.dynamic.config import prepare_dynamic_batching
from service.scheduling.dynamic.policy import BatchPolicy
from service.scheduling.dynamic.queues import PriorityQueues

MS = 1_000_000
T0 = 1_000 * MS


@dataclass
class OneInstance:
    policy: BatchPolicy
    queues: PriorityQueues
    exec_ns: int = 1 * MS
    hold: int = 0  # TRITONSERVER_DELAY_SCHEDULER
    now: int = T0
    busy_until: int | None = None
    wake_at: int | None = None
    sent: list[tuple[int, list[str]]] = field(default_factory=list)  # (ms after T0, names)
    rejected: list[tuple[int, str]] = field(default_factory=list)

    @classmethod
    def of(cls, config: mc.ModelConfig, **kwargs: int) -> OneInstance:
        prepare_dynamic_batching(config)
        return cls(
            BatchPolicy.from_config(config),
            PriorityQueues.from_config(config.dynamic_batching),
            **kwargs,
        )

    def arrive(
        self, at_ms: float, name: str, batch: int = 1, priority: int = 0, timeout_us: int = 0
    ) -> None:
        self.run_until(at_ms)
        job = Job({"X": np.zeros((batch, 16), np.float32)}, ["Y"], batch, name)
        job.priority, job.timeout_us = priority, timeout_us
        job.enqueue_ns = self.now
        self.queues.push(job, self.now)
        self.step()

    def run_until(self, at_ms: float) -> None:
        end = T0 + int(at_ms * MS)
        while True:
            due = [t for t in (self.wake_at, self.busy_until) if t is not None and t <= end]
            if not due:
                break
            self.now = min(due)
            if self.busy_until is not None and self.busy_until <= self.now:
                self.busy_until = None
            self.step()
        self.now = end

    def step(self) -> None:
        now, queues = self.now, self.queues
        self._reject(queues.reject_expired(now))
        if self.hold:
            if len(queues) < self.hold:
                return
            self.hold = 0
        self.wake_at = None
        while len(queues) and self.busy_until is None:
            decision = self.policy.decide(queues.scan(now), now)
            self._reject(queues.take_rejected())
            if not decision.take:
                self.wake_at = decision.wait_until_ns
                break
            batch = queues.pop(decision.take)
            self.sent.append((round((now - T0) / MS), [j.request_id for j in batch]))
            self.busy_until = now + self.exec_ns
        expiry = queues.next_expiry_ns()
        if expiry is not None and (self.wake_at is None or expiry < self.wake_at):
            self.wake_at = expiry

    def _reject(self, jobs: list[Job]) -> None:
        self.rejected.extend((round((self.now - T0) / MS), j.request_id) for j in jobs)


def model(max_batch: int = 8, **batching: object) -> mc.ModelConfig:
    cfg = mc.ModelConfig(name="m", max_batch_size=max_batch)
    cfg.dynamic_batching.SetInParent()
    for key, value in batching.items():
        target = getattr(cfg.dynamic_batching, key)
        if isinstance(value, list):
            target.extend(value)
        else:
            setattr(cfg.dynamic_batching, key, value)
    return cfg


def l0_batcher() -> mc.ModelConfig:
    """L0_batcher's models: preferred [2, 6], 10 s max queue delay, max_batch_size 8."""
    return model(8, preferred_batch_size=[2, 6], max_queue_delay_microseconds=10_000_000)


# ------------------------------------------------------------------------------ L0_batcher


def test_static_batches_at_a_preferred_size_or_above_the_largest_go_at_once() -> None:
    sim = OneInstance.of(l0_batcher())
    sim.arrive(0, "two", 2)
    sim.arrive(100, "six", 6)
    sim.arrive(200, "seven", 7)
    sim.run_until(20_000)
    assert sim.sent == [(0, ["two"]), (100, ["six"]), (200, ["seven"])]


def test_static_batches_below_or_between_preferred_sizes_wait_the_queue_delay() -> None:
    sim = OneInstance.of(l0_batcher())
    sim.arrive(0, "one", 1)
    sim.run_until(20_000)
    sim.arrive(30_000, "three", 3)
    sim.run_until(50_000)
    assert sim.sent == [(10_000, ["one"]), (40_000, ["three"])]


def test_multi_batch_not_preferred_waits_for_the_first_requests_delay() -> None:
    sim = OneInstance.of(l0_batcher())
    sim.arrive(0, "a", 1)
    sim.arrive(1_000, "b", 3)  # 4: still no preferred size
    sim.run_until(20_000)
    assert sim.sent == [(10_000, ["a", "b"])]


def test_multi_batch_gt_max_preferred_sends_both_at_once() -> None:
    sim = OneInstance.of(l0_batcher())
    sim.arrive(0, "a", 3)
    sim.arrive(1_000, "b", 7)  # 3 + 7 > 8 closes the batch; 7 alone is over 6
    sim.run_until(20_000)
    assert sim.sent == [(1_000, ["a"]), (1_001, ["b"])]


def test_multi_batch_sum_gt_max_preferred_delays_only_the_second() -> None:
    sim = OneInstance.of(l0_batcher())
    sim.arrive(0, "a", 3)
    sim.arrive(1_000, "b", 4)  # 3 + 4 > 6: the 3 goes now, the 4 waits its own delay
    sim.run_until(20_000)
    assert sim.sent == [(1_000, ["a"]), (11_000, ["b"])]


def test_two_single_requests_make_a_preferred_batch() -> None:
    sim = OneInstance.of(l0_batcher())
    sim.arrive(0, "a")
    sim.arrive(5, "b")
    assert sim.sent == [(5, ["a", "b"])]


def test_delayed_scheduler_uses_the_biggest_and_the_best_preferred_size() -> None:
    biggest = OneInstance.of(l0_batcher(), hold=6)
    for i in range(6):
        biggest.arrive(0, f"r{i}")
    biggest.run_until(20)
    assert biggest.sent == [(0, [f"r{i}" for i in range(6)])]
    best = OneInstance.of(l0_batcher(), hold=3)
    best.arrive(0, "a")
    best.arrive(0, "b")
    best.arrive(1_000, "c")
    best.run_until(20_000)
    assert best.sent == [(1_000, ["a", "b"]), (11_000, ["c"])]


def test_delayed_scheduler_sum_gt_max_preferred_and_use_max_batch() -> None:
    summed = OneInstance.of(l0_batcher(), hold=2)
    summed.arrive(0, "a", 3)
    summed.arrive(1_000, "b", 4)
    summed.run_until(20_000)
    assert summed.sent == [(1_000, ["a"]), (11_000, ["b"])]
    full = OneInstance.of(l0_batcher(), hold=3)
    full.arrive(0, "a", 3)
    full.arrive(0, "b", 4)
    full.arrive(11_000, "c", 1)  # the first two are past their delay: all 8 go together
    full.run_until(20_000)
    assert full.sent == [(11_000, ["a", "b", "c"])]


def test_preferred_sizes_without_a_queue_delay() -> None:
    cfg = model(8, preferred_batch_size=[4, 6])
    for count, batches in [(4, [4]), (5, [4, 1]), (7, [6, 1]), (3, [3])]:
        sim = OneInstance.of(cfg, hold=count)
        for i in range(count):
            sim.arrive(0, f"r{i}")
        sim.run_until(100)
        assert [len(names) for _, names in sim.sent] == batches


# ------------------------------------------------------------------------------ L0_model_queue


def l0_model_queue(**batching: object) -> mc.ModelConfig:
    return model(32, preferred_batch_size=[4, 8], **batching)


def test_max_queue_size_counts_only_waiting_requests() -> None:
    cfg = l0_model_queue()
    cfg.dynamic_batching.default_queue_policy.max_queue_size = 8
    sim = OneInstance.of(cfg, exec_ns=5_000 * MS)
    sim.arrive(0, "eight", 8)
    refused = 0
    for i in range(10):
        try:
            sim.arrive(500, f"r{i}")
        except Unavailable as exc:
            assert exc.message == f"[request id: r{i}] Exceeds maximum queue size"
            refused += 1
    sim.run_until(20_000)
    assert refused == 2
    assert sim.sent == [(0, ["eight"]), (5_000, [f"r{i}" for i in range(8)])]


def test_policy_reject_fails_the_expired_request_and_batches_the_rest() -> None:
    cfg = l0_model_queue(max_queue_delay_microseconds=10_000_000)
    cfg.dynamic_batching.default_queue_policy.default_timeout_microseconds = 100_000
    sim = OneInstance.of(cfg)
    sim.arrive(0, "first", 1)
    sim.arrive(200, "b", 2)
    sim.arrive(200, "c", 2)
    assert sim.rejected == [(100, "first")]
    assert sim.sent == [(200, ["b", "c"])]


def test_policy_delay_lets_later_requests_pass_the_expired_one() -> None:
    cfg = l0_model_queue(max_queue_delay_microseconds=10_000_000)
    policy = cfg.dynamic_batching.default_queue_policy
    policy.timeout_action = mc.ModelQueuePolicy.DELAY
    policy.default_timeout_microseconds = 100_000
    sim = OneInstance.of(cfg)
    sim.arrive(0, "first", 1)
    sim.arrive(200, "b", 2)
    sim.arrive(200, "c", 2)
    sim.run_until(20_000)
    assert sim.rejected == []
    assert sim.sent == [(200, ["b", "c"]), (10_000, ["first"])]


def test_timeout_override_applies_only_when_shorter() -> None:
    cfg = l0_model_queue(max_queue_delay_microseconds=10_000_000)
    policy = cfg.dynamic_batching.default_queue_policy
    policy.allow_timeout_override = True
    policy.default_timeout_microseconds = 1_000_000
    shorter = OneInstance.of(cfg)
    shorter.arrive(0, "first", 1, timeout_us=100_000)
    shorter.arrive(200, "b", 2)
    shorter.arrive(200, "c", 2)
    assert shorter.rejected == [(100, "first")] and shorter.sent == [(200, ["b", "c"])]
    longer = OneInstance.of(cfg)
    longer.arrive(0, "first", 1, timeout_us=10_000_000)  # longer than the default: ignored
    longer.arrive(200, "b", 2)
    longer.arrive(200, "c", 2)
    longer.run_until(20_000)
    # 1 + 2 + 2 = 5 is no preferred size; the first expires at 1 s and the rest form 4.
    assert longer.rejected == [(1_000, "first")] and longer.sent == [(1_000, ["b", "c"])]


def test_priority_levels_let_a_later_request_form_a_preferred_batch() -> None:
    for levels, default, low in [(2, 2, 0), (2**64 - 1, 2**32, 2**32)]:
        cfg = l0_model_queue(
            max_queue_delay_microseconds=10_000_000,
            priority_levels=levels,
            default_priority_level=default,
        )
        sim = OneInstance.of(cfg)
        sim.arrive(0, "a", 2)
        sim.arrive(100, "b", 1, priority=low)
        sim.arrive(300, "c", 2, priority=1)  # level 1: ahead of both, 2 + 2 = 4
        sim.run_until(20_000)
        assert sim.sent == [(300, ["c", "a"]), (10_100, ["b"])]


def test_priority_with_policy_delays_within_its_level_and_rejects_below() -> None:
    cfg = model(
        32,
        preferred_batch_size=[4, 8, 32],
        max_queue_delay_microseconds=10_000_000,
        priority_levels=2,
        default_priority_level=2,
    )
    default = cfg.dynamic_batching.default_queue_policy
    default.timeout_action = mc.ModelQueuePolicy.DELAY
    default.allow_timeout_override = True
    default.default_timeout_microseconds = 11_000_000
    level2 = cfg.dynamic_batching.priority_queue_policy[2]
    level2.timeout_action = mc.ModelQueuePolicy.REJECT
    level2.allow_timeout_override = True
    level2.default_timeout_microseconds = 11_000_000
    sim = OneInstance.of(cfg)
    sim.arrive(0, "p1-2", 2, priority=1)
    sim.arrive(200, "p1-1-short", 1, priority=1, timeout_us=1_000_000)
    sim.arrive(400, "p1-2b", 2, priority=1)
    sim.arrive(600, "p2-2-medium", 2, priority=2, timeout_us=2_000_000)
    sim.arrive(800, "p2-3", 3, priority=2)
    sim.arrive(1_000, "p2-6", 6, priority=2)
    sim.run_until(20_000)
    # At 1.2 s the short one is delayed behind its own level: 2 + 2 = 4 goes. At 2.6 s the
    # medium one is rejected and the delayed 1 joins the 3 (4); the 6 waits its delay.
    assert sim.rejected == [(2_600, "p2-2-medium")]
    assert sim.sent == [
        (1_200, ["p1-2", "p1-2b"]),
        (2_600, ["p1-1-short", "p2-3"]),
        (11_000, ["p2-6"]),
    ]
