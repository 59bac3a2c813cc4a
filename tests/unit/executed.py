"""Rows a scheduler executed, read from the batch statistics: the scheduler-level tests'
measure now that the inference count, as in Triton, grows only with each successful
request the core answers (``ModelStats.record_success``)."""

from __future__ import annotations

from service.statistics import ModelStats


def executed_rows(stats: ModelStats) -> int:
    return sum(size * batch.compute_infer.count for size, batch in stats.batches.items())
