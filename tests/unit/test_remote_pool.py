"""A pool of instances in worker processes, driven from the event loop (decision 030):
a batcher's batch is merged, sent and split on the loop, with no instance thread; the
worker's errors and its death reach the batch; a batch that finds the worker gone runs in
the instance's thread, which starts a new one. On asyncio's loop and on uvloop, which
makes a polled descriptor non-blocking (the channel must read its messages whole)."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import models
import numpy as np
import pytest
import uvloop
from test_isolated_instance import _cpu_ticks, _open
from test_onnxruntime_backend import SPEC, make_config

from service.backends.base import TimedOutputs
from service.backends.isolated import IsolatedInstance
from service.backends.onnxruntime import OnnxRuntimeBackend
from service.errors import Internal
from service.scheduling.base import Job
from service.scheduling.batch import JobOutputs, batch_steps
from service.scheduling.instances import InstancePool, InstanceWorker, Remote
from service.statistics import BatchTimings

Outcome = tuple[list[JobOutputs], BatchTimings]
LOOPS: dict[str, Callable[[], asyncio.AbstractEventLoop]] = {
    "asyncio": asyncio.new_event_loop,
    "uvloop": uvloop.new_event_loop,
}


@pytest.fixture(params=sorted(LOOPS))
def run(request: pytest.FixtureRequest) -> Iterator[Callable[[Any], Any]]:
    """Run a coroutine on a fresh loop of the parameter's kind."""
    loop = LOOPS[request.param]()
    yield loop.run_until_complete
    loop.close()


def _job(**inputs: np.ndarray) -> Job:
    rows = next(iter(inputs.values())).shape[0]
    return Job(dict(inputs), ["OUTPUT0", "OUTPUT1"], rows)


async def _dispatch(pool: InstancePool, jobs: list[Job]) -> Outcome:
    """One batch through ``dispatch`` as a batcher gives it; its outcome or its error."""
    worker = pool.try_acquire()
    assert worker is not None, "no free instance"
    future: asyncio.Future[Outcome] = asyncio.get_running_loop().create_future()

    def deliver(outcome: Any, error: BaseException | None) -> None:
        if error is None:
            future.set_result(outcome)
        else:
            future.set_exception(error)

    pool.dispatch(worker, lambda instance: batch_steps(instance, jobs), deliver, steps=True)
    return await future


@pytest.fixture
def pool(tmp_path: Path) -> Iterator[InstancePool]:
    instance = _open(tmp_path, models.add_sub_model())
    pool = InstancePool([InstanceWorker(instance)])
    yield pool
    pool.close()


def test_a_batch_runs_from_the_loop_without_a_thread(
    pool: InstancePool, run: Callable[[Any], Any]
) -> None:
    assert pool.remote and isinstance(pool.workers[0].instance, Remote)
    rng = np.random.default_rng(0)
    for rows, width in [(1, 4), (64, 4096)]:  # inline, and through the shared regions
        a = rng.random((rows, width), dtype=np.float32)
        b = rng.random((rows, width), dtype=np.float32)
        jobs = [_job(INPUT0=a[:1], INPUT1=b[:1]), _job(INPUT0=a[1:], INPUT1=b[1:])]
        per_job, timings = run(_dispatch(pool, jobs[: 1 if rows == 1 else 2]))
        got = {n: np.concatenate([out[n] for out in per_job]) for n in ("OUTPUT0", "OUTPUT1")}
        np.testing.assert_array_equal(got["OUTPUT0"], a + b)
        np.testing.assert_array_equal(got["OUTPUT1"], a - b)
        assert timings.start <= timings.input_end <= timings.infer_end <= timings.end
        assert pool.has_free  # freed before the outcome was delivered
    assert pool.workers[0]._thread is None  # the instance's thread never started


def test_the_workers_error_fails_the_batch_with_its_class_and_text(
    pool: InstancePool, run: Callable[[Any], Any]
) -> None:
    with pytest.raises(Internal, match=r"onnx runtime error: .*INPUT1"):
        run(_dispatch(pool, [_job(INPUT0=np.ones((1, 4), np.float32))]))
    ones = np.ones((2, 4), np.float32)
    (out,), _ = run(_dispatch(pool, [_job(INPUT0=ones, INPUT1=ones)]))
    np.testing.assert_array_equal(out["OUTPUT0"], 2 * ones)


def test_a_worker_killed_mid_batch_fails_it_and_the_next_starts_a_new_one(
    tmp_path: Path, run: Callable[[Any], Any]
) -> None:
    width = 2048
    instance = _open(tmp_path, models.mlp_model(width, layers=3))
    pool = InstancePool([InstanceWorker(instance)])
    x = np.random.default_rng(0).random((2048, width), dtype=np.float32)
    victim = instance.worker_pid
    assert victim is not None

    async def killed_under_a_batch() -> Outcome:
        """Killed once it is seen running the batch (its CPU time grows by 50 ms): a
        fixed sleep raced the run on a fast moment."""
        idle = _cpu_ticks(victim)
        batch = asyncio.ensure_future(_dispatch(pool, [Job({"INPUT0": x}, ["OUTPUT0"], 2048)]))
        deadline = time.monotonic() + 30
        while _cpu_ticks(victim) < idle + 5 and not batch.done():
            assert time.monotonic() < deadline, "the worker never ran the batch"
            await asyncio.sleep(0.005)
        os.kill(victim, signal.SIGKILL)
        return await batch

    try:
        with pytest.raises(Internal) as failed:
            run(killed_under_a_batch())
        assert str(failed.value) == (
            "model 'm' instance 'm_0_0': the worker process was killed by signal SIGKILL "
            "during the execution; a new one starts with the next batch"
        )
        (out,), _ = run(_dispatch(pool, [Job({"INPUT0": x[:2]}, ["OUTPUT0"], 2)]))
        want = models.mlp_reference(x[:2], width, 3)
        np.testing.assert_allclose(out["OUTPUT0"], want, rtol=1e-4, atol=1e-4)
        assert instance.restarts == 1 and instance.worker_pid not in (None, victim)
        assert pool.workers[0]._thread is not None  # the restart ran in the thread
        (out,), _ = run(_dispatch(pool, [Job({"INPUT0": x[:1]}, ["OUTPUT0"], 1)]))
        np.testing.assert_allclose(out["OUTPUT0"], want[:1], rtol=1e-4, atol=1e-4)
    finally:
        pool.close()


def test_a_pool_with_an_instance_in_this_process_is_not_remote(tmp_path: Path) -> None:
    models.write_model(tmp_path, "m", models.add_sub_model(), None)
    local = OnnxRuntimeBackend().open(make_config(), tmp_path / "m" / "1", SPEC)
    pool = InstancePool([InstanceWorker(local)])
    assert not pool.remote
    pool.close()


def test_the_workers_run_times_are_the_batchs_compute(
    pool: InstancePool, run: Callable[[Any], Any]
) -> None:
    """ModelStatistics' compute_infer is the worker's own run (the issue: "the worker
    answers with the batch's timings"); the round trip is compute_input and _output."""
    ones = np.ones((1, 4), np.float32)
    before = time.monotonic_ns()
    _, timings = run(_dispatch(pool, [_job(INPUT0=ones, INPUT1=ones)]))
    after = time.monotonic_ns()
    assert before <= timings.start < timings.input_end < timings.infer_end < timings.end <= after
    instance = pool.workers[0].instance
    assert isinstance(instance, IsolatedInstance)
    outputs = instance.execute({"INPUT0": ones, "INPUT1": ones}, ["OUTPUT0"])
    assert isinstance(outputs, TimedOutputs) and list(outputs) == ["OUTPUT0"]
    assert after < outputs.run_start_ns < outputs.run_end_ns < time.monotonic_ns()


def test_steps_take_the_run_times_that_outputs_carry() -> None:
    ticks = iter([100, 110, 190, 200])  # start, merged, answered, split
    steps = batch_steps(_LocalStub(), [Job({"X": np.ones((1, 1))}, ["Y"], 1)], lambda: next(ticks))
    assert next(steps)[1] == ["Y"]
    with pytest.raises(StopIteration) as end:
        steps.send(TimedOutputs({"Y": np.ones((1, 1))}, 120, 180))
    assert end.value.value[1] == BatchTimings(100, 120, 180, 200)


class _LocalStub:
    """A tensor instance as far as ``batch_steps`` looks (not a request backend)."""

    spec = SPEC

    def execute(self, inputs: Any, outputs: Any) -> dict[str, Any]:
        raise AssertionError("the steps do not execute")


class _Stub:
    """A remote instance as the pool sees it: ``begin`` refuses (its worker is gone) or
    fails (writing the inputs); ``execute`` runs in the instance's thread."""

    spec = SPEC

    def __init__(self, begin: str) -> None:
        self.how = begin
        self.threads: list[str] = []

    def begin(self, execution: Any, answer: Any) -> bool:
        if self.how == "fails":
            raise MemoryError("no room for the inputs")
        return False

    def execute(self, inputs: Any, outputs: Any) -> dict[str, np.ndarray]:
        self.threads.append(threading.current_thread().name)
        return {name: inputs["INPUT0"] + 1 for name in outputs}

    def close(self) -> None:
        pass


def test_a_batch_the_worker_cannot_take_runs_in_the_thread_or_fails_alone(
    run: Callable[[Any], Any],
) -> None:
    ones = np.ones((1, 4), np.float32)
    refusing = _Stub("refuses")
    pool = InstancePool([InstanceWorker(refusing)])  # type: ignore[arg-type]
    assert pool.remote
    (out,), _ = run(_dispatch(pool, [_job(INPUT0=ones)]))
    np.testing.assert_array_equal(out["OUTPUT0"], ones + 1)
    assert refusing.threads == [SPEC.name]  # run by the instance's thread, not the loop
    pool.close()
    pool = InstancePool([InstanceWorker(_Stub("fails"))])  # type: ignore[arg-type]
    with pytest.raises(MemoryError, match="no room for the inputs"):
        run(_dispatch(pool, [_job(INPUT0=ones)]))
    assert pool.has_free  # the instance is free for the next batch
    pool.close()
