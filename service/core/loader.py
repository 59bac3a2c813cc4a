"""Turning one model version on disk into a ready ``ModelVersion``, or a reason it is not.

Everything here blocks (files, session creation) and runs in a worker thread, called from
the lifecycle manager.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from inference import model_config_pb2 as mc

from ..backends import backend_config
from ..backends.base import Backend, InstanceSpec, ModelInstance, RequestInstance
from ..backends.isolated import ISOLATED_BACKENDS, IsolatedBackend
from ..backends.registry import backend_for
from ..errors import InvalidArgument, status_text
from ..gpus import inventory
from ..repository.completion import (
    ModelSignature,
    check_against_signature,
    check_ragged_inputs,
    complete,
)
from ..repository.ensemble_config import ConfigLookup, step_shapes, validate_ensemble
from ..repository.limits import ConfigLimits, load_refusal
from ..repository.normalize import normalize_model_config
from ..scheduling.ensemble import EnsembleScheduler, StepRunner
from ..scheduling.factory import create_scheduler
from ..scheduling.instances import InstancePool, InstanceWorker
from ..scheduling.rate_limiter import RateLimiter
from .instance_groups import instance_specs
from .labels import read_labels
from .model import ModelState, ModelVersion, io_specs
from .warmup import warm_up, warmup_samples

__all__ = ["instance_specs", "instance_workers", "load_ensemble", "load_version"]

log = logging.getLogger(__name__)

# Models whose instances live in this process load one at a time, so that the resident-
# memory growth measured around the load belongs to that model (statistics' memory_usage
# is this estimate); on GPUs the same with the device memory NVML reports for this process
# (the first model on a device also pays for the CUDA context there). Instances in worker
# processes (Python models, isolated instances) are measured by their workers' memory, so
# such models load in parallel with any other.
_IN_PROCESS_LOAD_LOCK = threading.Lock()
#: Threads opening one model's instances at once.
_MAX_PARALLEL_INSTANCES = 32
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
    retries: int = 0,
    limiter: RateLimiter | None = None,
) -> ModelVersion:
    """``isolate``: instances of the backends in ``ISOLATED_BACKENDS`` run in worker
    processes (the split layout). ``retries`` (``--model-load-retry-count``): a version
    that fails is loaded again up to that many times, as Triton's model lifecycle does;
    the last attempt's reason stands. ``limiter``: Triton's rate limiter, when on."""
    for _ in range(retries):
        model = _load_once(base_config, version, path, limits, isolate, limiter)
        if model.ready:
            return model
    return _load_once(base_config, version, path, limits, isolate, limiter)


def _load_once(
    base_config: mc.ModelConfig,
    version: int,
    path: Path,
    limits: ConfigLimits | None,
    isolate: bool,
    limiter: RateLimiter | None,
) -> ModelVersion:
    config = mc.ModelConfig()
    config.CopyFrom(base_config)
    normalize_model_config(config)  # as read (Triton's GetNormalizedModelConfig)
    model = ModelVersion(config.name, version, config, state=ModelState.LOADING)
    instances: list[ModelInstance | RequestInstance] = []
    try:
        refusal = load_refusal(config, limits or ConfigLimits())  # before anything is made
        if refusal is not None:
            raise ValueError(refusal)
        if not path.is_dir():
            raise ValueError(f"version folder {version} does not exist")
        model.labels = read_labels(config, path.parent)
        backend = backend_for(config)
        own_workers = getattr(backend, "worker_processes", False)  # python-based ones
        if isolate and backend.name in ISOLATED_BACKENDS and not own_workers:
            backend = IsolatedBackend(backend)
        specs = instance_specs(config, backend_gpu=backend.supports_gpu)
        gpus = sorted({s.device_id for s in specs if s.kind == "KIND_GPU"})
        in_workers = getattr(backend, "worker_processes", False)
        # In-process instances are measured by this process's growth: one model at a time.
        with contextlib.nullcontext() if in_workers else _IN_PROCESS_LOAD_LOCK:
            before = 0 if in_workers else _resident_bytes()
            gpu_before = inventory().process_memory() if gpus and not in_workers else {}
            signature = _open_instances(backend, config, path, specs, instances)
            workers = [p for p in (getattr(i, "worker_pid", None) for i in instances) if p]
            grown = 0 if in_workers else max(0, _resident_bytes() - before)
            model.stats.memory_bytes = grown + sum(_resident_bytes(pid) for pid in workers)
            if gpus:
                gpu_after = {} if in_workers else inventory().process_memory()
                for pid in workers:  # a worker's device memory is all this model's
                    for g, used in inventory().process_memory(pid).items():
                        gpu_after[g] = gpu_after.get(g, 0) + used
                model.stats.gpu_memory_bytes = {
                    g: max(0, gpu_after.get(g, 0) - gpu_before.get(g, 0)) for g in gpus
                }
        model.inputs = io_specs(list(config.input))
        model.outputs = io_specs(list(config.output))
        warm_up(model, instances, warmup_samples(model, path.parent))
        workers = instance_workers(config, instances, limiter)
    except Exception as exc:  # every failure becomes the version's UNAVAILABLE reason
        for instance in instances:
            instance.close()
        return _unavailable(model, exc)
    pool = InstancePool(workers)
    tensors = (*signature.inputs, *signature.outputs) if signature is not None else ()
    declared = {t.name: t.shape for t in tensors}
    try:
        model.scheduler = create_scheduler(config, pool, model.stats, declared, path.parent)
    except ValueError as exc:
        pool.close()
        return _unavailable(model, exc)
    model.pool, model.backend, model.declared = pool, backend, declared
    model.state = ModelState.READY
    log.info("successfully loaded '%s' version %d", config.name, version)
    return model


def instance_workers(
    config: mc.ModelConfig,
    instances: list[ModelInstance | RequestInstance],
    limiter: RateLimiter | None,
) -> list[InstanceWorker]:
    """One worker thread per instance; with the rate limiter on, each registered with
    its group's ``rate_limiter`` (ValueError, Triton's text, when the limits could never
    let it run: nothing stays registered then)."""
    if limiter is None:
        return [InstanceWorker(instance) for instance in instances]
    groups = {group.name: group for group in config.instance_group}
    workers: list[InstanceWorker] = []
    try:
        for instance in instances:
            group = groups[instance.spec.name.rsplit("_", 1)[0]]
            reservation = limiter.register(
                instance.spec.name, group.rate_limiter, instance.spec.device_id
            )
            workers.append(InstanceWorker(instance, limiter=limiter, reservation=reservation))
    except ValueError as exc:
        for worker in workers:
            assert worker.reservation is not None
            limiter.unregister(worker.reservation)
        raise ValueError(status_text(InvalidArgument(str(exc)))) from None
    return workers


def _open_instances(
    backend: Backend,
    config: mc.ModelConfig,
    path: Path,
    specs: list[InstanceSpec],
    opened: list[ModelInstance | RequestInstance],
) -> ModelSignature | None:
    """Open every instance into ``opened``; the first one's signature.

    The first instance completes the config (auto-complete runs there); then the other
    instances open, and the first one's ``initialize`` runs (a backend that can defer it:
    ``open_deferred`` / ``finish_loading``), all in parallel, as Triton loads the instances
    of a backend that allows it: two instances that each take 10 s are ready in about 10 s.
    The first failure, in instance order, is raised once every step has ended.
    """
    first = getattr(backend, "open_deferred", backend.open)(config, path, specs[0])
    opened.append(first)
    signature = first.signature()
    settings = backend_config.current()
    if signature is not None:  # request backends may not know their tensors
        if settings.auto_complete:
            complete(config, signature, settings.default_max_batch_size(backend.name))
        check_against_signature(config, signature)
        if not isinstance(first, RequestInstance):  # a tensor backend takes ragged ones flat
            check_ragged_inputs(config, signature)
    # Again after auto-complete (Triton's UpdateModelConfig), before any initialize sees it.
    normalize_model_config(config)
    finish = getattr(first, "finish_loading", None)
    steps: list[Callable[[], object]] = [finish] if finish is not None else []
    steps += [functools.partial(backend.open, config, path, spec) for spec in specs[1:]]
    if not steps:
        return signature
    with ThreadPoolExecutor(min(len(steps), _MAX_PARALLEL_INSTANCES)) as pool:
        futures = [pool.submit(step) for step in steps]
    errors: list[BaseException] = []
    for future in futures:
        error = future.exception()
        if error is not None:
            errors.append(error)
        elif future.result() is not None:  # an opened instance (finish_loading returns None)
            opened.append(future.result())  # type: ignore[arg-type]
    if errors:
        raise errors[0]
    return signature


def _unavailable(model: ModelVersion, exc: Exception) -> ModelVersion:
    """Every load failure becomes the version's UNAVAILABLE reason, logged once."""
    model.state = ModelState.UNAVAILABLE
    model.reason = str(exc)
    log.error("failed to load '%s' version %d: %s", model.name, model.version, exc)
    return model


LabelLookup = Callable[[str, int], dict[str, tuple[str, ...]]]


def _step_labels(
    config: mc.ModelConfig, own: dict[str, tuple[str, ...]], lookup_labels: LabelLookup
) -> dict[str, tuple[str, ...]]:
    """Labels for the ensemble's outputs without a label file of their own: those of the
    step output that produces it, in the step's model version (Triton adds them with
    ``emplace``, so an output's own file, even one without labels, is kept)."""
    missing = {o.name for o in config.output if o.name not in own}
    found: dict[str, tuple[str, ...]] = {}
    for step in config.ensemble_scheduling.step:
        for model_output, tensor in step.output_map.items():
            if tensor in missing:
                labels = lookup_labels(step.model_name, step.model_version).get(model_output)
                if labels:
                    found[tensor] = labels
    return found


def load_ensemble(
    base_config: mc.ModelConfig,
    version: int,
    lookup: ConfigLookup,
    runner: StepRunner,
    limits: ConfigLimits | None = None,
    model_dir: Path | None = None,
    lookup_labels: LabelLookup | None = None,
) -> ModelVersion:
    """An ensemble has no instances: checking its steps and building its scheduler is all.

    ``model_dir``: where its own ``label_filename`` files are; ``lookup_labels``: a
    composing model's labels, for the outputs the ensemble has none for (Triton's
    model_lifecycle completes the ensemble's label provider from the producing step)."""
    config = mc.ModelConfig()
    config.CopyFrom(base_config)
    normalize_model_config(config)
    model = ModelVersion(config.name, version, config, state=ModelState.LOADING)
    try:
        refusal = load_refusal(config, limits or ConfigLimits())
        if refusal is not None:
            raise ValueError(refusal)
        tensor_types = validate_ensemble(config, lookup)
        if model_dir is not None:
            model.labels = read_labels(config, model_dir)
    except ValueError as exc:
        return _unavailable(model, exc)
    if lookup_labels is not None:
        model.labels.update(_step_labels(config, model.labels, lookup_labels))
    model.inputs = io_specs(list(config.input))
    model.outputs = io_specs(list(config.output))
    model.scheduler = EnsembleScheduler(
        config, runner, model.stats, tensor_types, shapes=step_shapes(config, lookup)
    )
    model.state = ModelState.READY
    log.info("successfully loaded ensemble '%s' version %d", config.name, version)
    return model
