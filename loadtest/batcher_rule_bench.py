"""CPU per dynamic-batcher step: the pure rules alone (queues.py + policy.py), in process.

Every wake-up of a model's batcher (a new request, a freed instance, a timer) runs one
step: drop requests whose caller left, then decide over a policy-applying scan of the
queue. This measures that step's CPU time (``time.process_time``, so other load on the
machine inflates it less than wall time) with N requests queued, for a plain queue and for
one with priority levels and queue timeouts. The step does not pop anything, so every
repetition sees the same queue.

    .venv/bin/python loadtest/batcher_rule_bench.py
"""

from __future__ import annotations

import time
import timeit

import numpy as np

from service.scheduling.base import Job
from service.scheduling.policy import BatchPolicy
from service.scheduling.queues import PriorityQueues, QueuePolicy

NOW = 10_000


def _queued(count: int, queues: PriorityQueues) -> PriorityQueues:
    for i in range(count):
        job = Job({"X": np.zeros((1, 16), np.float32)}, ["Y"], 1, priority=1 + i % 2)
        job.enqueue_ns = 1_000 + i
        queues.push(job, 1_000)
    return queues


def step_us(queues: PriorityQueues, policy: BatchPolicy, number: int = 3000) -> float:
    def step() -> None:
        queues.drop_done()
        policy.decide(queues.scan(NOW), NOW)

    best = min(timeit.repeat(step, number=number, repeat=9, timer=time.process_time))
    return best / number * 1e6


def main() -> None:
    policy = BatchPolicy(max_batch_size=64, max_queue_delay_ns=100_000)
    timed = QueuePolicy(default_timeout_us=10_000_000)
    print("| queued | plain queue, us/step | 2 levels + timeouts, us/step |")
    print("|---|---|---|")
    for count in (1, 8, 64):
        plain = step_us(_queued(count, PriorityQueues()), policy)
        levels = PriorityQueues(levels=2, default_level=2, default_policy=timed)
        print(f"| {count} | {plain:.2f} | {step_us(_queued(count, levels), policy):.2f} |")


if __name__ == "__main__":
    main()
