"""When to close a dynamic batch, and how large: Triton's rules as a pure function.

- Jobs join in serving order while their input shapes agree and the batch stays within
  ``max_batch_size``; the first job that does not fit closes the candidate.
- Sent at once: a batch that reached ``max_batch_size`` or the largest preferred size,
  one that cannot grow (the next job does not fit), or any batch when the queue delay is 0.
- Otherwise it waits until the oldest job has waited ``max_queue_delay``; then it sends the
  longest prefix of a preferred size if there is one, else everything in the candidate.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from inference import model_config_pb2 as mc

from .base import Job

__all__ = ["BatchPolicy", "Decision"]


@dataclass(frozen=True, slots=True)
class Decision:
    take: int = 0  # how many leading jobs to send now; 0 means wait
    wait_until_ns: int | None = None  # when to decide again (None: on the next event)


@dataclass(frozen=True)
class BatchPolicy:
    max_batch_size: int
    preferred: tuple[int, ...] = ()
    max_queue_delay_ns: int = 0

    @classmethod
    def from_config(cls, config: mc.ModelConfig) -> BatchPolicy:
        batching = config.dynamic_batching
        limit = max(config.max_batch_size, 1)
        return cls(
            max_batch_size=limit,
            preferred=tuple(sorted({p for p in batching.preferred_batch_size if 0 < p <= limit})),
            max_queue_delay_ns=batching.max_queue_delay_microseconds * 1000,
        )

    def decide(self, pending: Iterable[Job], now_ns: int) -> Decision:
        total = 0
        count = 0
        oldest = None
        key = None
        best_preferred = 0  # prefix length whose size is a preferred size
        can_grow = True
        for job in pending:
            if key is None:
                key = job.shape_key()
            elif self.max_batch_size > 1 and job.shape_key() != key:
                can_grow = False
                break
            if total + job.size > self.max_batch_size:
                can_grow = False
                break
            total += job.size
            count += 1
            if oldest is None or job.enqueue_ns < oldest:
                oldest = job.enqueue_ns
            if total in self.preferred:
                best_preferred = count
            if total >= self.max_batch_size:
                can_grow = False
                break
        if count == 0 or oldest is None:
            return Decision()
        if self.preferred and total == self.preferred[-1]:
            return Decision(take=count)
        if not can_grow or self.max_queue_delay_ns == 0:
            return Decision(take=best_preferred or count)
        due = oldest + self.max_queue_delay_ns
        if now_ns >= due:
            return Decision(take=best_preferred or count)
        return Decision(wait_until_ns=due)
