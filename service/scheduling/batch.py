"""Merging jobs into one execution and splitting the outputs back: pure functions.

Runs in the instance's thread, so concatenation and slicing never block the loop; for an
instance in a worker process of its own, on the loop (``batch_steps``): the execution
itself is then the worker's, and the loop only merges, sends and splits.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Sequence
from typing import Any, TypeGuard, cast

import numpy as np

from ..backends.base import (
    BackendRequest,
    ModelInstance,
    RequestInstance,
    ResponseSender,
    TimedOutputs,
)
from ..errors import ServerError
from ..statistics import BatchTimings
from .base import Array, Job
from .batch_io import BatchIO
from .responses import CollectingSender

__all__ = [
    "Execution",
    "Steps",
    "batch_steps",
    "compute_bounds",
    "drive",
    "execute_batch",
    "merge_inputs",
    "split_outputs",
    "takes_requests",
    "union_outputs",
]


def union_outputs(jobs: Sequence[Job]) -> list[str]:
    if len(jobs) == 1:  # the same names in the same order, without a generator per name
        return list(dict.fromkeys(jobs[0].outputs))
    names: list[str] = []
    for job in jobs:
        names.extend(n for n in job.outputs if n not in names)
    return names


def merge_inputs(jobs: Sequence[Job], io: BatchIO | None = None) -> dict[str, Array]:
    """The batch's inputs, concatenated along the batch dimension; with ``io`` (a model
    with ragged inputs, batch inputs or batch outputs) as ``BatchIO.merge`` makes them."""
    if io is not None:
        return io.merge(jobs)
    if len(jobs) == 1:
        return jobs[0].inputs
    return {name: np.concatenate([j.inputs[name] for j in jobs]) for name in jobs[0].inputs}


def split_outputs(
    jobs: Sequence[Job], results: dict[str, Array], io: BatchIO | None = None
) -> list[dict[str, Array]]:
    """Each job gets exactly its own rows of the outputs it asked for (batch outputs: its
    part by its input's shape, ``BatchIO.split``)."""
    if io is not None and io.outputs:
        return io.split(jobs, results)
    if len(jobs) == 1:
        return [{name: results[name] for name in jobs[0].outputs}]
    per_job = []
    offset = 0
    for job in jobs:
        rows = slice(offset, offset + job.batch_size)
        per_job.append({name: results[name][rows] for name in job.outputs})
        offset += job.batch_size
    return per_job


JobOutputs = dict[str, Array] | ServerError

_TAKES_REQUESTS: dict[type, bool] = {}


def takes_requests(instance: ModelInstance | RequestInstance) -> TypeGuard[RequestInstance]:
    """Whether ``instance`` is a request backend. Checked once per class: a structural
    isinstance on a runtime-checkable Protocol costs microseconds every time."""
    kind = type(instance)
    known = _TAKES_REQUESTS.get(kind)
    if known is None:
        known = _TAKES_REQUESTS[kind] = isinstance(instance, RequestInstance)
    return known


#: One tensor execution a batch asks for: the merged inputs and the outputs wanted.
Execution = tuple[dict[str, Array], list[str]]
#: A batch's work as steps: it yields the execution it needs, is sent its results (or
#: thrown the instance's error) and returns its outcome. The same steps run to the end
#: in an instance's thread (``drive``) or, for an instance in a worker process, on the
#: loop while the worker executes (``InstancePool``): no thread and no GIL hand-off.
Steps = Generator[Execution, dict[str, Array], Any]


def compute_bounds(results: dict[str, Array], input_end: int, infer_end: int) -> tuple[int, int]:
    """Where the model's compute began and ended: the worker's own run when the outputs
    carry it (``TimedOutputs``), else the stamps taken around ``execute``."""
    if isinstance(results, TimedOutputs):
        return results.run_start_ns, results.run_end_ns
    return input_end, infer_end


def drive(instance: ModelInstance | RequestInstance, steps: Steps) -> Any:
    """Run ``steps`` to its end in this thread, executing on ``instance``."""
    try:
        execution = next(steps)
        while True:
            execution = steps.send(cast(ModelInstance, instance).execute(*execution))
    except StopIteration as end:
        return end.value


def execute_batch(
    instance: ModelInstance | RequestInstance,
    jobs: Sequence[Job],
    clock: Callable[[], int] = time.monotonic_ns,
    io: BatchIO | None = None,
) -> tuple[list[JobOutputs], BatchTimings]:
    """Run ``jobs`` as one execution; each job gets its outputs or its own error.

    Decoupled jobs (with a ``sink``) get an empty dict here: their responses travel
    through the sink as the model sends them. ``io``: the model's ragged inputs, batch
    inputs and batch outputs (``BatchIO.of``), for a tensor backend's batch.
    """
    if takes_requests(instance):
        return _execute_requests(instance, jobs, clock)
    # ``batch_steps``'s one step called in place: the same stamps and calls without a
    # generator's start, send and StopIteration, which cost the loop's thread more than
    # the stamps for a small model's executions there (decision 072).
    start = clock()
    inputs = merge_inputs(jobs, io)
    input_end = clock()
    results = cast(ModelInstance, instance).execute(inputs, union_outputs(jobs))
    return _split(jobs, results, io, clock, start, input_end)


def batch_steps(
    instance: ModelInstance | RequestInstance,
    jobs: Sequence[Job],
    clock: Callable[[], int] = time.monotonic_ns,
    io: BatchIO | None = None,
) -> Generator[Execution, dict[str, Array], tuple[list[JobOutputs], BatchTimings]]:
    """``execute_batch`` as steps (see ``Steps``): a request backend's whole run happens
    before the first step, so it has none."""
    if takes_requests(instance):
        return _execute_requests(instance, jobs, clock)
    start = clock()
    inputs = merge_inputs(jobs, io)
    input_end = clock()
    results = yield inputs, union_outputs(jobs)
    return _split(jobs, results, io, clock, start, input_end)


def _split(
    jobs: Sequence[Job],
    results: dict[str, Array],
    io: BatchIO | None,
    clock: Callable[[], int],
    start: int,
    input_end: int,
) -> tuple[list[JobOutputs], BatchTimings]:
    """A tensor backend's execution, after it returned: each job's outputs and the
    execution's stamps (both ways of running a batch end here)."""
    input_end, infer_end = compute_bounds(results, input_end, clock())
    per_job: list[JobOutputs] = list(split_outputs(jobs, results, io))
    return per_job, BatchTimings(start, input_end, infer_end, clock())


def _execute_requests(
    instance: RequestInstance, jobs: Sequence[Job], clock: Callable[[], int]
) -> tuple[list[JobOutputs], BatchTimings]:
    """Request backends see the list of requests, as Triton's Python ``execute`` does."""
    start = clock()
    requests = [
        BackendRequest(
            inputs=job.inputs,
            requested_outputs=list(job.outputs),
            request_id=job.request_id,
            parameters=dict(job.parameters),
            correlation_id=job.correlation_id,
            timeout_us=job.timeout_us,
            trace_context=job.trace_context.parent_text() if job.trace_context else "",
            sequence_start=job.sequence_start,
            sequence_end=job.sequence_end,
            reschedulable=job.reschedulable,
        )
        for job in jobs
    ]
    collectors = [None if job.sink else CollectingSender(instance.spec.name, job) for job in jobs]
    senders: list[ResponseSender] = [
        job.sink if job.sink is not None else collector  # type: ignore[misc]
        for job, collector in zip(jobs, collectors, strict=True)
    ]
    input_end = clock()
    instance.execute_requests(requests, senders)
    infer_end = clock()
    per_job: list[JobOutputs] = []
    for job, request, collector in zip(jobs, requests, collectors, strict=True):
        job.rescheduled = request.rescheduled
        if collector is None or job.rescheduled:  # a rescheduled one answers in a later run
            per_job.append({})
            continue
        result = collector.result()
        if isinstance(result, dict):
            result = {name: result[name] for name in job.outputs if name in result}
        per_job.append(result)
    return per_job, BatchTimings(start, input_end, infer_end, clock())
