"""ModelConfig -> the scheduler that serves it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from inference import model_config_pb2 as mc

from ..backends.base import RequestInstance
from ..statistics import ModelStats
from .base import Scheduler
from .batch_io import BatchIO
from .default import DefaultScheduler
from .dynamic.batcher import DynamicBatchScheduler, ragged_inputs
from .dynamic.config import prepare_dynamic_batching
from .dynamic.drain import DrainBatchScheduler, drains
from .hooks import DELAY_ENV, hold_count
from .instances import InstancePool
from .sequence.batcher import SequenceBatchScheduler

__all__ = ["create_scheduler"]


def create_scheduler(
    config: mc.ModelConfig,
    pool: InstancePool,
    stats: ModelStats,
    declared: Mapping[str, Sequence[int]] | None = None,
    model_path: Path | None = None,
) -> Scheduler:
    """``declared`` are the model file's own tensor shapes (control and state tensors are
    shaped from them); ``model_path`` is the version folder's parent (initial state files).
    Raises ValueError for a scheduler config that cannot work."""
    if config.HasField("sequence_batching"):
        if BatchIO.of(config) is not None and _tensor_instances(pool):
            raise ValueError(
                f"model '{config.name}': ragged inputs, batch_input and batch_output are not "
                "supported with sequence_batching for this backend here"
            )
        return SequenceBatchScheduler(config, pool, stats, declared or {}, model_path or Path("."))
    if config.HasField("dynamic_batching"):
        # Triton batches nothing when max_batch_size is 0, but priorities and queue
        # policies still apply: its dynamic batcher runs with batches of one.
        prepare_dynamic_batching(config)
        # The draining threads are what a remote pool does without: its batches start
        # on the loop (InstancePool).
        plain = drains(config, bool(ragged_inputs(config)), hold_count(DELAY_ENV))
        if plain and not pool.remote:
            return DrainBatchScheduler(config, pool, stats)
        return DynamicBatchScheduler(config, pool, stats)
    return DefaultScheduler(pool, stats, io=BatchIO.of(config), name=config.name)


def _tensor_instances(pool: InstancePool) -> bool:
    """The pool's instances take merged tensors (a request backend gets each request's)."""
    return bool(pool.workers) and not isinstance(pool.workers[0].instance, RequestInstance)
