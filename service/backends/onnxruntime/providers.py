"""Choosing ONNX Runtime execution providers from a model config, as Triton's onnxruntime
backend does (src/onnxruntime.cc, names and defaults kept).

A GPU instance gets, in order, the ``gpu_execution_accelerator`` TensorRT provider (its
Triton parameters mapped to ``trt_*`` options), then CUDA on the instance's device with
Triton's CUDA options (``cudnn_conv_algo_search``, ``gpu_mem_limit``,
``arena_extend_strategy``, ``do_copy_in_default_stream`` from ``parameters``; anything
under a ``cuda`` accelerator passed through; ``optimization { cuda { graphs: true } }``
turns on CUDA graphs). ``cpu_execution_accelerator`` adds OpenVINO. CPU comes last.

An unknown accelerator or TensorRT parameter fails the load with Triton's message. A
provider this onnxruntime build lacks fails the load too (the model asked for a device
it would silently not get), unless the model sets ``parameters { key:
"allow_cpu_fallback" value { string_value: "true" } }``: then it is dropped with a warning.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from inference import model_config_pb2 as mc

from ..base import InstanceSpec

__all__ = ["ProviderChoice", "allow_cpu_fallback", "choose_providers", "cuda_graphs_enabled"]

log = logging.getLogger(__name__)

CPU = "CPUExecutionProvider"
CUDA = "CUDAExecutionProvider"
TENSORRT = "TensorrtExecutionProvider"
OPENVINO = "OpenVINOExecutionProvider"

Options = dict[str, str]
Accelerator = mc.ModelOptimizationPolicy.ExecutionAccelerators.Accelerator


def _bool(value: str) -> str:
    lowered = value.lower()
    if lowered in ("true", "on", "1"):
        return "1"
    if lowered in ("false", "off", "0"):
        return "0"
    raise ValueError(f"failed to convert '{value}' to boolean value")


def _int(value: str) -> str:
    try:
        return str(int(value))
    except ValueError:
        raise ValueError(f"failed to convert '{value}' to integral number") from None


def _unsigned(value: str) -> str:
    if not value.isdigit():
        raise ValueError(f"failed to convert '{value}' to unsigned integral number")
    return value


def _text(value: str) -> str:
    return value


# Triton accelerator parameter -> (TensorRT EP option, value check/normaliser).
_TRT_PARAMETERS: dict[str, tuple[str, Callable[[str], str]]] = {
    "max_workspace_size_bytes": ("trt_max_workspace_size", _unsigned),
    "trt_max_partition_iterations": ("trt_max_partition_iterations", _int),
    "trt_min_subgraph_size": ("trt_min_subgraph_size", _int),
    "int8_calibration_table_name": ("trt_int8_calibration_table_name", _text),
    "int8_use_native_calibration_table": ("trt_int8_use_native_calibration_table", _bool),
    "trt_dla_enable": ("trt_dla_enable", _bool),
    "trt_dla_core": ("trt_dla_core", _int),
    "trt_engine_cache_enable": ("trt_engine_cache_enable", _bool),
    "trt_engine_cache_path": ("trt_engine_cache_path", _text),
    "trt_engine_cache_prefix": ("trt_engine_cache_prefix", _text),
    "trt_dump_subgraphs": ("trt_dump_subgraphs", _bool),
    "trt_force_sequential_engine_build": ("trt_force_sequential_engine_build", _bool),
    "trt_context_memory_sharing_enable": ("trt_context_memory_sharing_enable", _bool),
    "trt_layer_norm_fp32_fallback": ("trt_layer_norm_fp32_fallback", _bool),
    "trt_timing_cache_enable": ("trt_timing_cache_enable", _bool),
    "trt_timing_cache_path": ("trt_timing_cache_path", _text),
    "trt_force_timing_cache": ("trt_force_timing_cache", _bool),
    "trt_detailed_build_log": ("trt_detailed_build_log", _bool),
    "trt_build_heuristics_enable": ("trt_build_heuristics_enable", _bool),
    "trt_sparsity_enable": ("trt_sparsity_enable", _bool),
    "trt_builder_optimization_level": ("trt_builder_optimization_level", _int),
    "trt_auxiliary_streams": ("trt_auxiliary_streams", _int),
    "trt_tactic_sources": ("trt_tactic_sources", _text),
    "trt_extra_plugin_lib_paths": ("trt_extra_plugin_lib_paths", _text),
    "trt_profile_min_shapes": ("trt_profile_min_shapes", _text),
    "trt_profile_max_shapes": ("trt_profile_max_shapes", _text),
    "trt_profile_opt_shapes": ("trt_profile_opt_shapes", _text),
    "trt_cuda_graph_enable": ("trt_cuda_graph_enable", _bool),
    "trt_dump_ep_context_model": ("trt_dump_ep_context_model", _bool),
    "trt_ep_context_file_path": ("trt_ep_context_file_path", _text),
    "trt_ep_context_embed_mode": ("trt_ep_context_embed_mode", _int),
}

_CUDNN_SEARCH = {0: "EXHAUSTIVE", 1: "HEURISTIC", 2: "DEFAULT"}
_ARENA_STRATEGY = {0: "kNextPowerOfTwo", 1: "kSameAsRequested"}
_SIZE_MAX = str(2**64 - 1)


@dataclass
class ProviderChoice:
    """Providers in priority order with their options, and what was asked for but dropped."""

    providers: list[tuple[str, Options]]
    dropped: list[str] = field(default_factory=list)

    @property
    def names(self) -> list[str]:
        return [name for name, _ in self.providers]

    @property
    def required(self) -> list[str]:
        """Providers the session must really enable (every one but the CPU fallback)."""
        return [name for name in self.names if name != CPU]


def _tensorrt_options(accel: Accelerator, device_id: int) -> Options:
    options: Options = {"device_id": str(device_id)}
    for key, value in accel.parameters.items():
        if key == "precision_mode":
            if value == "FP16":
                options["trt_fp16_enable"] = "1"
            elif value == "INT8":
                options["trt_int8_enable"] = "1"
            elif value != "FP32":
                raise ValueError(f"unsupported precision mode '{value}' is requested")
            continue
        entry = _TRT_PARAMETERS.get(key)
        if entry is None:
            raise ValueError(
                f"unknown parameter '{key}' is provided for TensorRT Execution Accelerator"
            )
        option, check = entry
        options[option] = check(value)
    return options


def _choice(key: str, text: str, table: dict[int, str]) -> str:
    value = int(_int(text))
    if value not in table:
        raise ValueError(f"unsupported {key} value '{value}' is requested")
    return table[value]


_CUDA_DEFAULTS: Options = {
    "cudnn_conv_algo_search": "EXHAUSTIVE",
    "gpu_mem_limit": _SIZE_MAX,
    "arena_extend_strategy": "kNextPowerOfTwo",
    "do_copy_in_default_stream": "1",
}
# Model ``parameters`` Triton reads for the CUDA provider -> value check/normaliser.
_CUDA_PARAMETERS: dict[str, Callable[[str], str]] = {
    "cudnn_conv_algo_search": lambda v: _choice("cudnn_conv_algo_search", v, _CUDNN_SEARCH),
    "gpu_mem_limit": _unsigned,
    "arena_extend_strategy": lambda v: _choice("arena_extend_strategy", v, _ARENA_STRATEGY),
    "do_copy_in_default_stream": _bool,
}
_CUDA_FLAGS = ("do_copy_in_default_stream", "use_ep_level_unified_stream", "enable_cuda_graph")


def cuda_graphs_enabled(config: mc.ModelConfig) -> bool:
    """``optimization { cuda { graphs: true } }``, or ``enable_cuda_graph`` on a ``cuda``
    accelerator (Triton's onnxruntime spelling)."""
    if config.optimization.cuda.graphs:
        return True
    for accel in config.optimization.execution_accelerators.gpu_execution_accelerator:
        value = accel.parameters.get("enable_cuda_graph")
        if accel.name == "cuda" and value is not None and _bool(value) == "1":
            return True
    return False


def allow_cpu_fallback(config: mc.ModelConfig) -> bool:
    if "allow_cpu_fallback" not in config.parameters:
        return False
    return _bool(config.parameters["allow_cpu_fallback"].string_value) == "1"


def _gpu_providers(config: mc.ModelConfig, device_id: int) -> list[tuple[str, Options]]:
    """TensorRT (when asked) then CUDA: defaults < ``cuda`` accelerator < ``parameters``."""
    wanted: list[tuple[str, Options]] = []
    cuda = dict(_CUDA_DEFAULTS)
    for accel in config.optimization.execution_accelerators.gpu_execution_accelerator:
        if accel.name == "tensorrt":
            wanted.append((TENSORRT, _tensorrt_options(accel, device_id)))
        elif accel.name == "cuda":
            for key, value in accel.parameters.items():
                cuda[key] = _bool(value) if key in _CUDA_FLAGS else value
        else:
            raise ValueError(f"unknown Execution Accelerator '{accel.name}' is requested")
    for key, check in _CUDA_PARAMETERS.items():
        if key in config.parameters:
            cuda[key] = check(config.parameters[key].string_value)
    if cuda_graphs_enabled(config):
        cuda["enable_cuda_graph"] = "1"
    cuda["device_id"] = str(device_id)
    wanted.append((CUDA, cuda))
    return wanted


def choose_providers(
    config: mc.ModelConfig, spec: InstanceSpec, available: Sequence[str]
) -> ProviderChoice:
    """Raises ValueError (the load's reason) for a config Triton would refuse, or for a
    provider this build lacks unless ``allow_cpu_fallback`` is set."""
    wanted: list[tuple[str, Options]] = []
    if spec.kind in ("KIND_GPU", "KIND_AUTO"):
        wanted.extend(_gpu_providers(config, spec.device_id))
    for accel in config.optimization.execution_accelerators.cpu_execution_accelerator:
        if accel.name != "openvino":
            raise ValueError(f"unknown Execution Accelerator '{accel.name}' is requested")
        wanted.append((OPENVINO, {"device_type": "CPU"}))
    choice = ProviderChoice(providers=[])
    for name, options in wanted:
        if name in available:
            choice.providers.append((name, options))
        else:
            choice.dropped.append(name)
    choice.providers.append((CPU, {}))
    if choice.dropped:
        text = (
            f"{', '.join(choice.dropped)} not available in this onnxruntime build "
            f"(it has {', '.join(available)})"
        )
        if not allow_cpu_fallback(config):
            raise ValueError(
                f"instance '{spec.name}' needs {text}; install onnxruntime-gpu (docs/gpu.md) "
                "or set parameter allow_cpu_fallback to run without it"
            )
        log.warning(
            "model '%s' instance '%s': %s; using %s (allow_cpu_fallback)",
            config.name,
            spec.name,
            text,
            ", ".join(choice.names),
        )
    return choice
