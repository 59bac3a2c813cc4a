"""When to send a dynamic batch, and which requests it holds: Triton's rule as a pure function.

This is ``DynamicBatchScheduler::GetDynamicBatch`` of Triton core r24.10 for a batch formed
when an instance is free (so nothing is already waiting in a payload). Requests are examined
in serving order; the pending batch grows while they fit:

- a request that would take the batch past ``max_batch_size``, or whose input shapes differ
  from the first request's, closes it ("send now");
- whenever the pending batch size is a preferred size, that prefix is marked as the best
  batch; the first request that would take it past the largest preferred size marks the
  prefix before it instead (when nothing is marked yet), and scanning goes on.

Then, with ``d`` the age of the oldest pending request:

1. a marked prefix is sent at once unless ``d`` reached ``max_queue_delay`` (then 3. sends all);
2. nothing pending (every request expired): nothing to send;
3. everything pending is sent when the batch was closed, reached the largest preferred size,
   the delay is exceeded, or the delay is 0;
4. otherwise wait until the delay expires or the closest request timeout has passed,
   whichever is first; Triton waits in whole microseconds, so less than 1 us left counts
   as none left and sends now.

With no preferred sizes configured, ``max_batch_size`` is the one preferred size (Triton's
config normalisation).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from inference import model_config_pb2 as mc

from ..base import Job

__all__ = ["BatchPolicy", "Decision"]

ShapeKey = tuple[tuple[str, tuple[int, ...]], ...]


@dataclass(frozen=True, slots=True)
class Decision:
    take: int = 0  # how many leading jobs to send now; 0 means wait
    wait_until_ns: int | None = None  # when to decide again (None: on the next event)


@dataclass(frozen=True)
class BatchPolicy:
    max_batch_size: int
    preferred: tuple[int, ...] = ()
    max_queue_delay_ns: int = 0
    # Inputs that may differ in shape within a batch (allow_ragged_batch, for backends
    # that take requests one by one); every other input must agree, as in Triton.
    ragged: frozenset[str] = frozenset()
    _sizes: frozenset[int] = field(init=False, repr=False, compare=False)
    _largest: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        sizes = frozenset(self.preferred) or frozenset({self.max_batch_size})
        object.__setattr__(self, "_sizes", sizes)
        object.__setattr__(self, "_largest", max(sizes))

    @classmethod
    def from_config(
        cls, config: mc.ModelConfig, ragged: frozenset[str] = frozenset()
    ) -> BatchPolicy:
        batching = config.dynamic_batching
        return cls(
            max_batch_size=max(config.max_batch_size, 1),
            preferred=tuple(sorted(set(batching.preferred_batch_size))),
            max_queue_delay_ns=batching.max_queue_delay_microseconds * 1000,
            ragged=ragged,
        )

    def _key(self, job: Job) -> ShapeKey:
        key = job.shape_key()
        if self.ragged:
            return tuple(item for item in key if item[0] not in self.ragged)
        return key

    def decide(self, pending: Iterable[Job], now_ns: int) -> Decision:
        jobs = iter(pending)
        first = next(jobs, None)
        if first is None:
            return Decision()
        limit = self.max_batch_size
        largest = self._largest
        sizes = self._sizes
        shape_key = self._key if self.ragged else Job.shape_key
        key = shape_key(first)
        total = first.size  # the pending batch: its size, its jobs
        count = 1
        best = 1 if total in sizes else 0  # jobs in the marked prefix (0: none marked)
        send_now = False
        oldest = first.enqueue_ns
        closest = first.deadline_ns  # nearest request timeout in the pending batch
        for job in jobs:
            grown = total + job.size
            if grown > largest and not best:
                best = count
            if grown > limit or shape_key(job) != key:
                send_now = True
                break
            total = grown
            count += 1
            if job.enqueue_ns < oldest:
                oldest = job.enqueue_ns
            deadline = job.deadline_ns
            if deadline is not None and (closest is None or deadline < closest):
                closest = deadline
            if total in sizes:
                best = count
        delay = self.max_queue_delay_ns
        age = now_ns - oldest
        exceeded = delay != 0 and age >= delay
        if best and not exceeded:
            return Decision(take=best)
        if send_now or total >= largest or exceeded or delay == 0:
            return Decision(take=count)
        wait_ns = delay - age
        if closest is not None and closest - now_ns < wait_ns:
            # Triton sleeps until the timeout and rescans after it: the first instant at
            # which the request has expired (every job the scan passed is unexpired).
            if (closest - now_ns) // 1000 == 0:
                return Decision(take=count)
            return Decision(wait_until_ns=closest + 1)
        if wait_ns // 1000 == 0:
            return Decision(take=count)
        return Decision(wait_until_ns=now_ns + wait_ns // 1000 * 1000)
