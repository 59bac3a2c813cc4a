"""Priority queues with Triton's queue policies: size limits and request timeouts.

Pure and synchronous, with time passed in: the dynamic batcher's driver owns the clock,
and tests drive these rules with any clock they like.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass

from inference import model_config_pb2 as mc

from ..errors import ResourceExhausted, request_prefix
from .base import Job

__all__ = ["PriorityQueues", "QueuePolicy"]


@dataclass(frozen=True)
class QueuePolicy:
    delay_on_timeout: bool = False  # timeout_action DELAY (else REJECT)
    default_timeout_us: int = 0
    allow_timeout_override: bool = False
    max_queue_size: int = 0  # 0: unbounded

    @classmethod
    def from_proto(cls, policy: mc.ModelQueuePolicy) -> QueuePolicy:
        return cls(
            delay_on_timeout=policy.timeout_action == mc.ModelQueuePolicy.DELAY,
            default_timeout_us=policy.default_timeout_microseconds,
            allow_timeout_override=policy.allow_timeout_override,
            max_queue_size=policy.max_queue_size,
        )

    def timeout_us(self, job: Job) -> int:
        if self.allow_timeout_override and job.timeout_us > 0:
            return job.timeout_us
        return self.default_timeout_us


class PriorityQueues:
    """Level 1 is served first; FIFO within a level; timed-out DELAY jobs after all others."""

    def __init__(
        self,
        levels: int = 0,
        default_level: int = 0,
        default_policy: QueuePolicy | None = None,
        level_policies: dict[int, QueuePolicy] | None = None,
    ) -> None:
        self.levels = max(levels, 1)
        self.default_level = default_level if 1 <= default_level <= self.levels else 1
        base = default_policy or QueuePolicy()
        overrides = level_policies or {}
        self._policies = {lvl: overrides.get(lvl, base) for lvl in range(1, self.levels + 1)}
        self._queues: dict[int, deque[Job]] = {lvl: deque() for lvl in self._policies}
        self._delayed: deque[Job] = deque()
        # Most configs set no timeouts: then expiry scans are skipped entirely.
        self.has_timeouts = any(
            p.default_timeout_us or p.allow_timeout_override for p in self._policies.values()
        )

    @classmethod
    def from_config(cls, batching: mc.ModelDynamicBatching) -> PriorityQueues:
        return cls(
            levels=batching.priority_levels,
            default_level=batching.default_priority_level,
            default_policy=QueuePolicy.from_proto(batching.default_queue_policy),
            level_policies={
                int(lvl): QueuePolicy.from_proto(p)
                for lvl, p in batching.priority_queue_policy.items()
            },
        )

    def level_for(self, job: Job) -> int:
        return job.priority if 1 <= job.priority <= self.levels else self.default_level

    def push(self, job: Job, now_ns: int) -> None:
        level = self.level_for(job)
        policy = self._policies[level]
        queue = self._queues[level]
        if policy.max_queue_size and len(queue) >= policy.max_queue_size:
            raise ResourceExhausted(f"{request_prefix(job.request_id)}Exceeds maximum queue size")
        timeout = policy.timeout_us(job)
        job.deadline_ns = now_ns + timeout * 1000 if timeout > 0 else None
        queue.append(job)

    def expire(self, now_ns: int) -> list[Job]:
        """Apply timeouts: REJECT jobs are removed and returned, DELAY jobs move last."""
        rejected: list[Job] = []
        if not self.has_timeouts:
            return rejected
        for level, queue in self._queues.items():
            if not any(j.deadline_ns is not None and j.deadline_ns <= now_ns for j in queue):
                continue
            delay = self._policies[level].delay_on_timeout
            keep: deque[Job] = deque()
            for job in queue:
                if job.deadline_ns is None or job.deadline_ns > now_ns:
                    keep.append(job)
                elif delay:
                    job.deadline_ns = None
                    self._delayed.append(job)
                else:
                    rejected.append(job)
            self._queues[level] = keep
        return rejected

    def drop_done(self) -> list[Job]:
        """Remove jobs whose caller is gone (future cancelled) and return them."""
        dropped: list[Job] = []
        for key, queue in [*self._queues.items(), (0, self._delayed)]:
            if any(j.future is not None and j.future.done() for j in queue):
                keep = deque(j for j in queue if j.future is None or not j.future.done())
                dropped.extend(j for j in queue if j.future is not None and j.future.done())
                if key == 0:
                    self._delayed = keep
                else:
                    self._queues[key] = keep
        return dropped

    def __iter__(self) -> Iterator[Job]:
        for level in sorted(self._queues):
            yield from self._queues[level]
        yield from self._delayed

    def __len__(self) -> int:
        return sum(len(q) for q in self._queues.values()) + len(self._delayed)

    def next_deadline(self) -> int | None:
        if not self.has_timeouts:
            return None
        deadlines = [j.deadline_ns for q in self._queues.values() for j in q if j.deadline_ns]
        return min(deadlines) if deadlines else None

    def pop(self, count: int) -> list[Job]:
        """Remove and return the first ``count`` jobs in serving order."""
        taken: list[Job] = []
        for queue in [*(self._queues[lvl] for lvl in sorted(self._queues)), self._delayed]:
            while queue and len(taken) < count:
                taken.append(queue.popleft())
        return taken
