"""Triton's priority queue for the dynamic batcher: one FIFO per priority level in use.

Pure and synchronous, with time passed in: the dynamic batcher's driver owns the clock,
and tests drive these rules with any clock they like. The rules are those of
``PriorityQueue`` in Triton core r24.10 (``scheduler_utils.cc``):

- a request's level is its priority when that is in ``[1, priority_levels]``, else the
  default level; lower levels are served first;
- within a level: its unexpired requests in arrival order, then the ones a DELAY timeout
  moved behind them (before any later level);
- only levels in use are stored: those with their own policy for good, others from their
  first request until they are empty, so ``priority_levels`` may be 2**64 - 1;
- ``max_queue_size`` bounds each level, delayed requests included;
- a request's deadline is the policy's ``default_timeout_microseconds``; with
  ``allow_timeout_override`` the request's own ``timeout`` applies when it is shorter. It has
  expired once the clock is past the deadline;
- timeouts take effect where the batch scan reaches a request (``scan``): DELAY moves it
  behind its level's unexpired requests, REJECT fails it. While no instance is free, REJECT
  also happens at the deadline (``reject_expired``; Triton checks every 500 ms then).
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from inference import model_config_pb2 as mc

from ...errors import Unavailable, request_prefix
from ..base import Job

__all__ = ["PriorityQueues", "QueuePolicy"]


@dataclass(frozen=True, slots=True)
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
        """Triton lets a request shorten the default timeout, never lengthen or add one."""
        timeout = self.default_timeout_us
        if self.allow_timeout_override and 0 < job.timeout_us < timeout:
            return job.timeout_us
        return timeout


class _Level:
    __slots__ = ("delayed", "keep", "policy", "queue")

    def __init__(self, policy: QueuePolicy, keep: bool) -> None:
        self.policy = policy
        self.keep = keep
        self.queue: deque[Job] = deque()  # unexpired, in arrival order
        self.delayed: deque[Job] = deque()  # timed out under DELAY, in the order they expired

    def __len__(self) -> int:
        return len(self.queue) + len(self.delayed)


def _queue_full(job: Job) -> Unavailable:
    """Triton's code and text for a full level. Refused before the model accepted it, so
    no failure statistic (``failure`` None), as in Triton."""
    return Unavailable(f"{request_prefix(job.request_id)}Exceeds maximum queue size")


def _without_done(queue: deque[Job], dropped: list[Job]) -> deque[Job]:
    kept: deque[Job] = deque()
    for job in queue:
        (dropped if job.future is not None and job.future.done() else kept).append(job)
    return kept


class PriorityQueues:
    """The requests a dynamic batcher holds, in serving order (see the module docstring)."""

    def __init__(
        self,
        levels: int = 0,
        default_level: int = 0,
        default_policy: QueuePolicy | None = None,
        level_policies: Mapping[int, QueuePolicy] | None = None,
    ) -> None:
        self.levels = levels
        self.default_level = default_level
        self._default_policy = default_policy or QueuePolicy()
        self._levels: dict[int, _Level] = {}
        self._order: list[int] = []  # keys of _levels, ascending
        self._size = 0
        self._rejected: list[Job] = []
        if levels == 0:  # one queue; per-level policies do not apply
            self._open(0, self._default_policy, keep=True)
        else:
            for level, policy in (level_policies or {}).items():
                self._open(level, policy, keep=True)
        policies = [self._default_policy, *(lvl.policy for lvl in self._levels.values())]
        # Most configs set no timeouts: then expiry checks are skipped entirely.
        self.has_timeouts = any(p.default_timeout_us for p in policies)

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

    def _open(self, key: int, policy: QueuePolicy, keep: bool) -> _Level:
        level = self._levels[key] = _Level(policy, keep)
        bisect.insort(self._order, key)
        return level

    def _close_if_unused(self, key: int) -> None:
        level = self._levels.get(key)
        if level is not None and not level.keep and not level.queue and not level.delayed:
            del self._levels[key]
            self._order.remove(key)

    def level_for(self, job: Job) -> int:
        return job.priority if 1 <= job.priority <= self.levels else self.default_level

    def push(self, job: Job, now_ns: int) -> None:
        """Queue ``job`` at its level; a full level refuses it with UNAVAILABLE."""
        key = self.level_for(job)
        level = self._levels.get(key)
        if level is None:
            level = self._open(key, self._default_policy, keep=False)
        policy = level.policy
        if policy.max_queue_size and len(level) >= policy.max_queue_size:
            raise _queue_full(job)
        timeout = policy.timeout_us(job) if self.has_timeouts else 0
        job.deadline_ns = now_ns + timeout * 1000 if timeout else None
        level.queue.append(job)
        self._size += 1

    def scan(self, now_ns: int) -> Iterator[Job]:
        """Jobs in serving order, applying each level's timeout policy as the scan reaches
        a job (Triton's cursor). Rejected jobs wait in ``take_rejected``."""
        for key in self._order:
            level = self._levels[key]
            queue = level.queue
            if not level.policy.default_timeout_us:
                yield from queue
            else:
                index = 0
                while index < len(queue):
                    job = queue[index]
                    if job.deadline_ns is None or now_ns <= job.deadline_ns:
                        yield job
                        index += 1
                        continue
                    del queue[index]
                    job.deadline_ns = None
                    if level.policy.delay_on_timeout:
                        level.delayed.append(job)
                    else:
                        self._size -= 1
                        self._rejected.append(job)
            yield from level.delayed

    def take_rejected(self) -> list[Job]:
        """Jobs a REJECT timeout removed during scans since the last call."""
        rejected, self._rejected = self._rejected, []
        if rejected:
            for key in list(self._order):
                self._close_if_unused(key)
        return rejected

    def reject_expired(self, now_ns: int) -> list[Job]:
        """Remove every expired job of a REJECT level (no scan reaches them while busy)."""
        for key in self._order:
            level = self._levels[key]
            if level.policy.delay_on_timeout or not level.policy.default_timeout_us:
                continue
            if any(j.deadline_ns is not None and now_ns > j.deadline_ns for j in level.queue):
                keep: deque[Job] = deque()
                for job in level.queue:
                    if job.deadline_ns is not None and now_ns > job.deadline_ns:
                        job.deadline_ns = None
                        self._rejected.append(job)
                        self._size -= 1
                    else:
                        keep.append(job)
                level.queue = keep
        return self.take_rejected()

    def next_expiry_ns(self) -> int | None:
        """The first instant a REJECT job will have expired (None: no such job)."""
        soonest: int | None = None
        for level in self._levels.values():
            if level.policy.delay_on_timeout or not level.policy.default_timeout_us:
                continue
            for job in level.queue:
                if job.deadline_ns is not None and (soonest is None or job.deadline_ns < soonest):
                    soonest = job.deadline_ns
        return None if soonest is None else soonest + 1

    def drop_done(self) -> list[Job]:
        """Remove jobs whose caller is gone (future done) and return them."""
        dropped: list[Job] = []
        for level in self._levels.values():
            if any(j.future is not None and j.future.done() for j in level.queue):
                level.queue = _without_done(level.queue, dropped)
            if level.delayed and any(
                j.future is not None and j.future.done() for j in level.delayed
            ):
                level.delayed = _without_done(level.delayed, dropped)
        if dropped:
            self._size -= len(dropped)
            for key in list(self._order):
                self._close_if_unused(key)
        return dropped

    def pop(self, count: int) -> list[Job]:
        """Remove and return the first ``count`` jobs in serving order."""
        taken: list[Job] = []
        for key in list(self._order):
            level = self._levels[key]
            for queue in (level.queue, level.delayed):
                while queue and len(taken) < count:
                    taken.append(queue.popleft())
            self._close_if_unused(key)
            if len(taken) == count:
                break
        self._size -= len(taken)
        return taken

    def __iter__(self) -> Iterator[Job]:
        """Serving order, without applying any policy."""
        for key in self._order:
            level = self._levels[key]
            yield from level.queue
            yield from level.delayed

    def __len__(self) -> int:
        return self._size

    @property
    def levels_in_use(self) -> int:
        return len(self._levels)
