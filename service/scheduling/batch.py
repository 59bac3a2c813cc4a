"""Merging jobs into one execution and splitting the outputs back: pure functions.

Runs in the instance's worker thread, so concatenation and slicing never block the loop.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import numpy as np

from ..backends.base import ModelInstance
from ..statistics import BatchTimings
from .base import Array, Job

__all__ = ["execute_batch", "merge_inputs", "split_outputs", "union_outputs"]


def union_outputs(jobs: Sequence[Job]) -> list[str]:
    names: list[str] = []
    for job in jobs:
        names.extend(n for n in job.outputs if n not in names)
    return names


def merge_inputs(jobs: Sequence[Job]) -> dict[str, Array]:
    if len(jobs) == 1:
        return jobs[0].inputs
    return {name: np.concatenate([j.inputs[name] for j in jobs]) for name in jobs[0].inputs}


def split_outputs(jobs: Sequence[Job], results: dict[str, Array]) -> list[dict[str, Array]]:
    """Each job gets exactly its own rows of the outputs it asked for."""
    if len(jobs) == 1:
        return [{name: results[name] for name in jobs[0].outputs}]
    per_job = []
    offset = 0
    for job in jobs:
        rows = slice(offset, offset + job.batch_size)
        per_job.append({name: results[name][rows] for name in job.outputs})
        offset += job.batch_size
    return per_job


def execute_batch(
    instance: ModelInstance,
    jobs: Sequence[Job],
    clock: Callable[[], int] = time.monotonic_ns,
) -> tuple[list[dict[str, Array]], BatchTimings]:
    start = clock()
    inputs = merge_inputs(jobs)
    input_end = clock()
    results = instance.execute(inputs, union_outputs(jobs))
    infer_end = clock()
    per_job = split_outputs(jobs, results)
    return per_job, BatchTimings(start, input_end, infer_end, clock())
