"""Handing an execution's outcome to each job's caller, on the loop's thread.

Every scheduler ends a job the same way: the caller's future gets the job's own outputs
(or its error), and a caller that already left gets nothing but is counted
(``abandoned.count_abandoned``), so a cancelled request is counted exactly once.
"""

from __future__ import annotations

from collections.abc import Callable

from ..errors import ServerError, Unavailable
from ..statistics import BatchTimings, ModelStats
from .abandoned import caller_gone, count_abandoned
from .base import ExecutionResult, Job
from .batch import JobOutputs

__all__ = ["batch_failure", "outcome_of", "settle"]


def outcome_of(job: Job, out: JobOutputs, timings: BatchTimings) -> ExecutionResult | ServerError:
    """One job's share of a batch: its outputs with its own queue time, or its error (a
    model's own error response keeps the execution, which counts it as a success)."""
    if isinstance(out, ServerError):
        if out.is_response:
            out.answered = (timings.start - job.enqueue_ns, timings, job.size)
        return out
    return ExecutionResult(out, timings.start - job.enqueue_ns, timings)


def batch_failure(error: BaseException | None) -> ServerError:
    """What each job of a batch that failed as a whole gets (a backend's own error as is)."""
    return error if isinstance(error, ServerError) else Unavailable(str(error))


def settle(
    stats: ModelStats,
    job: Job,
    outcome: ExecutionResult | BaseException,
    clock: Callable[[], int],
) -> bool:
    """Give ``outcome`` to the job's caller, or count it when the caller has left.

    True when the caller got it: the job's future is done only now, so the scheduler
    counts the job out of its in-flight work here (else its ``abandon`` did)."""
    future = job.future
    if future is not None and not future.done():
        if isinstance(outcome, BaseException):
            future.set_exception(outcome)
        else:
            future.set_result(outcome)
        return True
    if caller_gone(job):  # it ran after its caller left: counted here
        count_abandoned(stats, job, outcome, clock())
    return False
