"""Choosing ONNX Runtime execution providers from a model config.

``instance_group.kind`` picks CPU or GPU; ``optimization.execution_accelerators`` adds
TensorRT (GPU) or OpenVINO (CPU). A provider this onnxruntime build lacks is dropped with
a warning and the instance runs on what remains (CPU at the end), as Triton users expect
from a machine without a GPU.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from inference import model_config_pb2 as mc

from ..base import InstanceSpec

__all__ = ["ProviderChoice", "choose_providers"]

log = logging.getLogger(__name__)

CPU = "CPUExecutionProvider"
CUDA = "CUDAExecutionProvider"
TENSORRT = "TensorrtExecutionProvider"
OPENVINO = "OpenVINOExecutionProvider"

# Triton accelerator parameter -> TensorRT EP option.
_TRT_OPTIONS = {
    "max_workspace_size_bytes": "trt_max_workspace_size",
    "trt_engine_cache_enable": "trt_engine_cache_enable",
    "trt_engine_cache_path": "trt_engine_cache_path",
}


@dataclass
class ProviderChoice:
    """Providers in priority order with their options, and what was asked for but dropped."""

    providers: list[tuple[str, dict[str, Any]]]
    dropped: list[str] = field(default_factory=list)

    @property
    def names(self) -> list[str]:
        return [name for name, _ in self.providers]


def _tensorrt_options(
    accel: mc.ModelOptimizationPolicy.ExecutionAccelerators.Accelerator, device_id: int
) -> dict[str, Any]:
    options: dict[str, Any] = {"device_id": device_id}
    for key, value in accel.parameters.items():
        if key == "precision_mode":
            options["trt_fp16_enable"] = value.upper() == "FP16"
            options["trt_int8_enable"] = value.upper() == "INT8"
        elif key in _TRT_OPTIONS:
            options[_TRT_OPTIONS[key]] = value
    return options


def choose_providers(
    config: mc.ModelConfig, spec: InstanceSpec, available: Sequence[str]
) -> ProviderChoice:
    wanted: list[tuple[str, dict[str, Any]]] = []
    accelerators = config.optimization.execution_accelerators
    gpu = spec.kind == "KIND_GPU" or (spec.kind == "KIND_AUTO" and CUDA in available)
    if gpu:
        for accel in accelerators.gpu_execution_accelerator:
            if accel.name == "tensorrt":
                wanted.append((TENSORRT, _tensorrt_options(accel, spec.device_id)))
            else:
                log.warning(
                    "model '%s': unknown gpu_execution_accelerator '%s' ignored",
                    config.name,
                    accel.name,
                )
        wanted.append((CUDA, {"device_id": spec.device_id}))
    for accel in accelerators.cpu_execution_accelerator:
        if accel.name == "openvino":
            wanted.append((OPENVINO, {}))
        else:
            log.warning(
                "model '%s': unknown cpu_execution_accelerator '%s' ignored",
                config.name,
                accel.name,
            )
    choice = ProviderChoice(providers=[])
    for name, options in wanted:
        if name in available:
            choice.providers.append((name, options))
        else:
            choice.dropped.append(name)
    choice.providers.append((CPU, {}))
    if choice.dropped:
        log.warning(
            "model '%s' instance '%s': %s not available in this onnxruntime build; using %s",
            config.name,
            spec.name,
            ", ".join(choice.dropped),
            ", ".join(choice.names),
        )
    return choice
