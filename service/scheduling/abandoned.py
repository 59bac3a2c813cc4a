"""Jobs whose caller went away (cancelled, or its deadline passed) before the answer.

Triton records a request when the backend finishes with it, whatever the client did, so
a job that still runs counts, once it finishes, as a success or a failure, and also as
cancelled. A job dropped before it ran counts as a failure and as cancelled (Triton's
failure reason CANCELED). The scheduler that finishes the job counts it, because the
caller (the core's ``infer``) is gone by then: ``count_abandoned`` is its one place.
"""

from __future__ import annotations

import asyncio
import threading

from ..errors import Internal
from ..statistics import ModelStats
from .base import ExecutionResult, Job
from .inflight import InFlight

__all__ = ["caller_gone", "caller_left", "count_abandoned", "count_if_delivered_too_late"]


def caller_gone(job: Job) -> bool:
    """The caller stopped waiting for ``job.future`` (cancelled it, or its deadline did)."""
    return job.future is not None and job.future.cancelled()


def count_abandoned(
    stats: ModelStats, job: Job, outcome: ExecutionResult | BaseException, now_ns: int
) -> None:
    """``job`` finished after its caller went away: its success or failure, and a
    cancellation (the backend's outputs are not validated: nobody receives them)."""
    request_ns = now_ns - job.enqueue_ns
    if isinstance(outcome, ExecutionResult):
        stats.record_success(request_ns, outcome.queue_ns, outcome.timings, job.size)
    else:
        backend = isinstance(outcome, Internal)
        reason = getattr(outcome, "failure", None) or ("BACKEND" if backend else "OTHER")
        stats.record_failure(request_ns, reason, job.size)
        if backend:
            stats.record_backend_failure()
    stats.record_caller_gone()


def count_if_delivered_too_late(
    stats: ModelStats, job: Job, future: asyncio.Future[ExecutionResult], now_ns: int
) -> None:
    """The caller was cancelled after ``future`` got its outcome but before it woke up:
    the outcome reached nobody, so it is counted here (called from the caller's
    ``except CancelledError``). A cancelled ``future`` is the scheduler's to count."""
    if future.done() and not future.cancelled():
        error = future.exception()
        count_abandoned(stats, job, error if error is not None else future.result(), now_ns)


def caller_left(
    stats: ModelStats, claims: threading.Lock, inflight: InFlight, job: Job, now_ns: int
) -> None:
    """The caller of a job queued for the instance threads stopped waiting: its future is
    cancelled unless already settled (an unsettled job leaves ``inflight`` here, a settled
    one left it when settled). Whether a thread took the job is decided under ``claims``
    (the threads take it under the same lock); one not taken is skipped and counted
    CANCELED, one taken is counted where it ends."""
    future = job.future
    assert future is not None
    if future.cancel() or future.cancelled():
        inflight.leave()
    with claims:
        queued = not job.started
        job.started = True  # a thread that takes it now skips it
    if queued:  # dropped unexecuted: a CANCELED failure
        stats.record_cancelled(now_ns - job.enqueue_ns, job.size)
    else:  # it ran or runs on: counted where it is delivered (or was, unread)
        count_if_delivered_too_late(stats, job, future, now_ns)
