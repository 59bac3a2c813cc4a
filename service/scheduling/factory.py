"""ModelConfig -> the scheduler that serves it."""

from __future__ import annotations

from inference import model_config_pb2 as mc

from .base import Scheduler
from .default import DefaultScheduler
from .instances import InstancePool

__all__ = ["create_scheduler"]


def create_scheduler(config: mc.ModelConfig, pool: InstancePool) -> Scheduler:
    # Dynamic and sequence batching arrive with their own schedulers; until then every
    # model is served by the default scheduler, which honours instance_group parallelism.
    return DefaultScheduler(pool)
