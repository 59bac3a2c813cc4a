"""Every scheduler ends a job through ``delivery.settle``: the caller gets its outcome
once, and an outcome for a caller that left is counted instead (exactly once)."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from service.errors import Internal, ServerError, Unavailable
from service.scheduling.base import ExecutionResult, Job
from service.scheduling.delivery import batch_failure, outcome_of, settle
from service.statistics import BatchTimings, ModelStats

TIMINGS = BatchTimings(start=1_000, input_end=1_100, infer_end=1_900, end=2_000)


def _job(enqueue_ns: int = 400) -> Job:
    return Job(
        inputs={"X": np.zeros((1, 2), np.float32)},
        outputs=["Y"],
        batch_size=1,
        enqueue_ns=enqueue_ns,
    )


def test_outcome_of_gives_each_job_its_own_queue_time() -> None:
    out = {"Y": np.ones((1, 2), np.float32)}
    result = outcome_of(_job(enqueue_ns=400), out, TIMINGS)
    assert isinstance(result, ExecutionResult)
    assert result.queue_ns == 600 and result.timings is TIMINGS and result.outputs is out
    error = Internal("bad row")
    assert outcome_of(_job(), error, TIMINGS) is error


def test_batch_failure_keeps_server_errors_and_wraps_the_rest() -> None:
    error = Internal("backend said no")
    assert batch_failure(error) is error
    wrapped = batch_failure(RuntimeError("thread died"))
    assert isinstance(wrapped, Unavailable) and isinstance(wrapped, ServerError)
    assert "thread died" in wrapped.message


def test_settle_hands_the_outcome_to_a_waiting_caller() -> None:
    async def main() -> None:
        stats, job = ModelStats(), _job()
        job.future = asyncio.get_running_loop().create_future()
        result = outcome_of(job, {"Y": np.ones((1, 2), np.float32)}, TIMINGS)
        settle(stats, job, result, lambda: 5_000)
        assert job.future.result() is result
        failing = _job()
        failing.future = asyncio.get_running_loop().create_future()
        settle(stats, failing, Internal("no"), lambda: 5_000)
        with pytest.raises(Internal):
            failing.future.result()
        assert stats.cancelled == 0 and stats.inference_count == 0  # the caller counts these

    asyncio.run(main())


@pytest.mark.parametrize("failed", [False, True])
def test_settle_counts_an_outcome_whose_caller_left(failed: bool) -> None:
    async def main() -> None:
        stats, job = ModelStats(), _job()
        job.future = asyncio.get_running_loop().create_future()
        job.future.cancel()
        outcome = Internal("no") if failed else outcome_of(job, {"Y": np.ones((1, 2))}, TIMINGS)
        settle(stats, job, outcome, lambda: 5_000)
        assert stats.cancelled == 1
        assert (stats.fail.count, stats.success.count) == ((1, 0) if failed else (0, 1))

    asyncio.run(main())


def test_settle_ignores_a_job_without_a_caller() -> None:
    stats = ModelStats()
    settle(stats, _job(), Internal("no"), lambda: 5_000)
    assert stats.cancelled == 0 and stats.fail.count == 0
