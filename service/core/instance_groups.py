"""``instance_group`` → the instances of one model version, with Triton's rules for GPUs.

As in Triton's core (model_config_utils.cc): ``KIND_AUTO`` becomes ``KIND_GPU`` when the
backend can use a GPU and every GPU the group lists is present (all supported GPUs when
it lists none), else ``KIND_CPU``; a ``KIND_GPU`` group without ``gpus`` gets every
supported GPU; a group without ``count`` gets two instances on the CPU for ONNX Runtime
and TensorFlow, else one (Triton's SetDefaultInstanceCount); ``count`` instances are
made *per listed GPU*, each named ``<group>_<n>`` like Triton's; a group that asks for a
GPU that is not there fails the load with Triton's message. The resolved values are
written back into the config, so ``ModelConfig`` shows what the server chose.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

from inference import model_config_pb2 as mc

from ..backends.base import InstanceSpec
from ..gpus import MIN_COMPUTE_CAPABILITY, inventory

__all__ = ["instance_specs"]

_GROUP = mc.ModelInstanceGroup
_TWO_ON_CPU = frozenset({"onnxruntime", "tensorflow"})


def _supported_gpus() -> list[int]:
    return inventory().supported(MIN_COMPUTE_CAPABILITY)


def _resolve(config: mc.ModelConfig, backend_gpu: bool, gpus: Callable[[], Sequence[int]]) -> None:
    """Fill Triton's defaults into every group and check the GPUs they name. A config
    without groups gets one named as the model (its instances 'm_0', ...), as Triton's
    NormalizeInstanceGroup names it; an unnamed group is 'm_<index>'."""
    if not config.instance_group:
        config.instance_group.add(name=config.name)
    for index, group in enumerate(config.instance_group):
        if not group.name:
            group.name = f"{config.name}_{index}"
        if group.kind == _GROUP.KIND_AUTO:
            present = set(gpus()) if backend_gpu else set()
            usable = bool(present) and all(g in present for g in group.gpus)
            group.kind = _GROUP.KIND_GPU if usable else _GROUP.KIND_CPU
        if group.count < 1:
            # Triton's SetDefaultInstanceCount: two for a CPU group of the backends that
            # opted in (TensorFlow, ONNX Runtime), else one.
            cpu_two = group.kind == _GROUP.KIND_CPU and config.backend in _TWO_ON_CPU
            group.count = 2 if cpu_two else 1
        if group.kind == _GROUP.KIND_GPU and not group.gpus:
            group.gpus.extend(gpus())
        _check(config.name, group, gpus)


def _check(model: str, group: mc.ModelInstanceGroup, gpus: Callable[[], Sequence[int]]) -> None:
    prefix = f"instance group {group.name} of model {model}"
    if group.kind == _GROUP.KIND_GPU:
        supported = list(gpus())
        if not group.gpus:
            # Only reached when no GPU is supported: an empty list was filled from them.
            raise ValueError(f"{prefix} has kind KIND_GPU but no GPUs are available")
        for gpu in group.gpus:
            if gpu not in supported:
                raise ValueError(
                    f"{prefix} specifies invalid or unsupported gpu id {gpu}. GPUs with at "
                    "least the minimum required CUDA compute compatibility of "
                    f"{MIN_COMPUTE_CAPABILITY:f} are: {', '.join(str(g) for g in supported)}"
                )
    elif group.gpus:
        kind = _GROUP.Kind.Name(group.kind)
        raise ValueError(f"{prefix} has kind {kind} but specifies one or more GPUs")


def instance_specs(
    config: mc.ModelConfig,
    cpu_count: int | None = None,
    gpus: Sequence[int] | None = None,
    backend_gpu: bool = True,
) -> list[InstanceSpec]:
    """Expand ``instance_group`` into instances, filling Triton's defaults into the config.

    ``gpus`` are the supported CUDA ordinals (None: ask the GPU inventory, only when a
    group needs it, so CPU-only models never touch NVML). ``backend_gpu`` says whether
    the model's backend can run on a GPU at all (``KIND_AUTO`` then stays on the CPU).
    The intra-op thread budget splits the cores among all instances of the model so that
    N parallel executions do not oversubscribe the machine.
    """
    known: list[Sequence[int]] = [] if gpus is None else [gpus]

    def supported() -> Sequence[int]:
        if not known:
            known.append(_supported_gpus())
        return known[0]

    _resolve(config, backend_gpu, supported)
    settings: list[tuple[str, str, int]] = []
    for group in config.instance_group:
        kind = _GROUP.Kind.Name(group.kind)
        devices = list(group.gpus) if group.kind == _GROUP.KIND_GPU else [0]
        for i in range(group.count):
            settings.extend((f"{group.name}_{i}", kind, device) for device in devices)
    threads = max(1, (cpu_count or os.cpu_count() or 1) // len(settings))
    return [InstanceSpec(name, kind, device, threads) for name, kind, device in settings]
