"""The sequence batcher over request backends (Python models, built-ins): a row per request.

Triton feeds control tensors and input states to every backend, so each request of the
batch carries its own row of them (shape ``[1, ...]`` when the model batches). A Direct
batch's empty slot becomes a null request, as in Triton: the first request's inputs as
zeros, not READY, correlation ID 0, no flags, nothing requested; its answer is dropped.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Literal

from ...backends.base import RequestInstance
from ...errors import ServerError
from ...statistics import BatchTimings
from ..base import Array, Job
from ..batch import execute_batch

__all__ = ["RESCHEDULED", "RowOutputs", "execute_request_rows"]

#: A row the model released with TRITONSERVER_REQUEST_RELEASE_RESCHEDULE: it runs again.
Rescheduled = Literal["rescheduled"]
RESCHEDULED: Rescheduled = "rescheduled"

#: What one row of a sequence batch yields: its outputs, its own error, or None (empty slot).
RowOutputs = dict[str, Array] | ServerError | Rescheduled | None


def _row_job(job: Job | None, inputs: Mapping[str, Array], index: int, batched: bool) -> Job:
    pick = slice(index, index + 1) if batched else slice(None)
    row = {name: array[pick] for name, array in inputs.items()}
    if job is None:
        return Job(row, [], 1 if batched else 0)
    return Job(
        row,
        job.outputs,
        job.batch_size,
        job.request_id,
        correlation_id=job.correlation_id,
        sequence_start=job.sequence_start,
        sequence_end=job.sequence_end,
        parameters=job.parameters,
        sink=job.sink,
        reschedulable=job.reschedulable,
    )


def execute_request_rows(
    instance: RequestInstance,
    rows: Sequence[Job | None],
    inputs: Mapping[str, Array],
    batched: bool,
    start: int,
    clock: Callable[[], int],
) -> tuple[list[RowOutputs], BatchTimings]:
    """Blocking, in the instance's thread. ``inputs`` holds the whole batch (client inputs,
    controls, states) as built for tensor backends; each request gets its own row of it."""
    jobs = [_row_job(job, inputs, index, batched) for index, job in enumerate(rows)]
    results, timings = execute_batch(instance, jobs, clock)
    per_row: list[RowOutputs] = [
        None if job is None else RESCHEDULED if row.rescheduled else result
        for job, row, result in zip(rows, jobs, results, strict=True)
    ]
    return per_row, BatchTimings(start, timings.input_end, timings.infer_end, timings.end)
