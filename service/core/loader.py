"""Turning one model version on disk into a ready ``ModelVersion``, or a reason it is not.

Everything here blocks (files, session creation) and runs in a worker thread, called from
the lifecycle manager.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

from inference import model_config_pb2 as mc

from ..backends.base import ModelInstance, RequestInstance
from ..backends.isolated import ISOLATED_BACKENDS, IsolatedBackend
from ..backends.registry import get_backend
from ..gpus import inventory
from ..repository.completion import check_against_signature, complete
from ..repository.ensemble_config import ConfigLookup, validate_ensemble
from ..repository.limits import ConfigLimits, load_refusal
from ..scheduling.ensemble import EnsembleScheduler, StepRunner
from ..scheduling.factory import create_scheduler
from ..scheduling.instances import InstancePool, InstanceWorker
from .instance_groups import instance_specs
from .labels import read_labels
from .model import ModelState, ModelVersion, io_specs

__all__ = ["instance_specs", "load_ensemble", "load_version"]

log = logging.getLogger(__name__)

# Instances are created one at a time so that the resident-memory growth measured around
# each load belongs to that model (statistics' memory_usage is this estimate). On GPUs the
# same is done with the device memory NVML reports for this process (the first model on a
# device also pays for the CUDA context there).
_LOAD_LOCK = threading.Lock()
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _resident_bytes(pid: int | str = "self") -> int:
    try:
        with open(f"/proc/{pid}/statm", encoding="ascii") as statm:
            return int(statm.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return 0


def load_version(
    base_config: mc.ModelConfig,
    version: int,
    path: Path,
    limits: ConfigLimits | None = None,
    isolate: bool = False,
) -> ModelVersion:
    """``isolate``: instances of the backends in ``ISOLATED_BACKENDS`` run in worker
    processes (the split layout)."""
    config = mc.ModelConfig()
    config.CopyFrom(base_config)
    model = ModelVersion(config.name, version, config, state=ModelState.LOADING)
    instances: list[ModelInstance | RequestInstance] = []
    try:
        refusal = load_refusal(config, limits or ConfigLimits())  # before anything is made
        if refusal is not None:
            raise ValueError(refusal)
        if not path.is_dir():
            raise ValueError(f"version folder {version} does not exist")
        model.labels = read_labels(config, path.parent)
        backend = get_backend(config.backend)
        if isolate and backend.name in ISOLATED_BACKENDS:
            backend = IsolatedBackend(backend)
        specs = instance_specs(config, backend_gpu=backend.supports_gpu)
        gpus = sorted({s.device_id for s in specs if s.kind == "KIND_GPU"})
        with _LOAD_LOCK:
            before = _resident_bytes()
            gpu_before = inventory().process_memory() if gpus else {}
            instances.append(backend.open(config, path, specs[0]))
            signature = instances[0].signature()
            if signature is not None:  # request backends may not know their tensors
                complete(config, signature)
                check_against_signature(config, signature)
            instances.extend(backend.open(config, path, spec) for spec in specs[1:])
            workers = [p for p in (getattr(i, "worker_pid", None) for i in instances) if p]
            model.stats.memory_bytes = max(0, _resident_bytes() - before) + sum(
                _resident_bytes(pid) for pid in workers
            )
            if gpus:
                gpu_after = inventory().process_memory()
                for pid in workers:  # a worker's device memory is all this model's
                    for g, used in inventory().process_memory(pid).items():
                        gpu_after[g] = gpu_after.get(g, 0) + used
                model.stats.gpu_memory_bytes = {
                    g: max(0, gpu_after.get(g, 0) - gpu_before.get(g, 0)) for g in gpus
                }
    except Exception as exc:  # every failure becomes the version's UNAVAILABLE reason
        for instance in instances:
            instance.close()
        return _unavailable(model, exc)
    model.inputs = io_specs(list(config.input))
    model.outputs = io_specs(list(config.output))
    pool = InstancePool([InstanceWorker(instance) for instance in instances])
    tensors = (*signature.inputs, *signature.outputs) if signature is not None else ()
    declared = {t.name: t.shape for t in tensors}
    try:
        model.scheduler = create_scheduler(config, pool, model.stats, declared, path.parent)
    except ValueError as exc:
        pool.close()
        return _unavailable(model, exc)
    model.state = ModelState.READY
    log.info("successfully loaded '%s' version %d", config.name, version)
    return model


def _unavailable(model: ModelVersion, exc: Exception) -> ModelVersion:
    """Every load failure becomes the version's UNAVAILABLE reason, logged once."""
    model.state = ModelState.UNAVAILABLE
    model.reason = str(exc)
    log.error("failed to load '%s' version %d: %s", model.name, model.version, exc)
    return model


def load_ensemble(
    base_config: mc.ModelConfig,
    version: int,
    lookup: ConfigLookup,
    runner: StepRunner,
    limits: ConfigLimits | None = None,
) -> ModelVersion:
    """An ensemble has no instances: checking its steps and building its scheduler is all."""
    config = mc.ModelConfig()
    config.CopyFrom(base_config)
    model = ModelVersion(config.name, version, config, state=ModelState.LOADING)
    try:
        refusal = load_refusal(config, limits or ConfigLimits())
        if refusal is not None:
            raise ValueError(refusal)
        tensor_types = validate_ensemble(config, lookup)
    except ValueError as exc:
        return _unavailable(model, exc)
    model.inputs = io_specs(list(config.input))
    model.outputs = io_specs(list(config.output))
    model.scheduler = EnsembleScheduler(config, runner, model.stats, tensor_types)
    model.state = ModelState.READY
    log.info("successfully loaded ensemble '%s' version %d", config.name, version)
    return model
