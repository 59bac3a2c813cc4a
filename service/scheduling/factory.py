"""ModelConfig -> the scheduler that serves it."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path

from inference import model_config_pb2 as mc

from ..statistics import ModelStats
from .base import Scheduler
from .default import DefaultScheduler
from .dynamic import DynamicBatchScheduler
from .instances import InstancePool
from .sequence import SequenceBatchScheduler

__all__ = ["create_scheduler"]

log = logging.getLogger(__name__)


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
        return SequenceBatchScheduler(config, pool, stats, declared or {}, model_path or Path("."))
    if config.HasField("dynamic_batching"):
        if config.max_batch_size > 0:
            return DynamicBatchScheduler(config, pool, stats)
        log.warning(
            "model '%s': dynamic_batching needs max_batch_size > 0; using the default scheduler",
            config.name,
        )
    return DefaultScheduler(pool, stats)
