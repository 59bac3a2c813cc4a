"""ModelConfig -> the scheduler that serves it."""

from __future__ import annotations

import logging

from inference import model_config_pb2 as mc

from ..statistics import ModelStats
from .base import Scheduler
from .default import DefaultScheduler
from .dynamic import DynamicBatchScheduler
from .instances import InstancePool

__all__ = ["create_scheduler"]

log = logging.getLogger(__name__)


def create_scheduler(config: mc.ModelConfig, pool: InstancePool, stats: ModelStats) -> Scheduler:
    if config.HasField("dynamic_batching"):
        if config.max_batch_size > 0:
            return DynamicBatchScheduler(config, pool, stats)
        log.warning(
            "model '%s': dynamic_batching needs max_batch_size > 0; using the default scheduler",
            config.name,
        )
    return DefaultScheduler(pool, stats)
