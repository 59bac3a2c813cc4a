"""The PyTorch backend's model ``parameters``, parsed as Triton's ``ParseParameters``.

Booleans take true/false, on/off, 1/0 in any case; a value outside those fails the load
with Triton's words. Triton logs one line per parameter it read (e.g. ``Inference Mode is
enabled for model instance 'm'``); ``lines`` keeps them so that the backend logs them at
load, once per model as Triton does.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from inference import model_config_pb2 as mc

from ...errors import InvalidArgument

__all__ = ["TorchOptions", "parse_options"]

_TRUE = ("true", "on", "1")
_FALSE = ("false", "off", "0")


@dataclass(frozen=True)
class TorchOptions:
    optimized_execution: bool = True  # DISABLE_OPTIMIZED_EXECUTION inverted
    inference_mode: bool = True  # INFERENCE_MODE
    cudnn: bool = True  # DISABLE_CUDNN inverted
    cache_cleaning: bool = False  # ENABLE_CACHE_CLEANING
    weight_sharing: bool = False  # ENABLE_WEIGHT_SHARING
    tensor_fuser: bool | None = None  # ENABLE_TENSOR_FUSER; None: torch's own default
    jit_profiling: bool | None = None  # ENABLE_JIT_PROFILING
    jit_executor: bool | None = None  # ENABLE_JIT_EXECUTOR
    intra_op_threads: int | None = None  # INTRA_OP_THREAD_COUNT (> 0 only)
    inter_op_threads: int | None = None  # INTER_OP_THREAD_COUNT (> 0 only)
    lines: tuple[str, ...] = field(default=(), compare=False)


def _bool(config: mc.ModelConfig, key: str) -> bool | None:
    if key not in config.parameters:
        return None
    value = config.parameters[key].string_value
    lowered = value.lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise InvalidArgument(f"failed to convert '{value}' to boolean value")


def _int(config: mc.ModelConfig, key: str) -> int | None:
    if key not in config.parameters:
        return None
    value = config.parameters[key].string_value
    try:
        return int(value.strip())
    except ValueError:
        raise InvalidArgument(f"failed to convert '{value}' to integral number") from None


def _state(on: bool) -> str:
    return "enabled" if on else "disabled"


def parse_options(config: mc.ModelConfig) -> TorchOptions:
    """The options, or InvalidArgument for a value Triton refuses. A config without
    ``parameters`` keeps every default and logs nothing, as Triton."""
    if not config.parameters:
        return TorchOptions()
    where = f"for model instance '{config.name}'"
    lines: list[str] = []
    disable_optimized = _bool(config, "DISABLE_OPTIMIZED_EXECUTION")
    optimized = not disable_optimized if disable_optimized is not None else True
    lines.append(f"Optimized execution is {_state(optimized)} {where}")
    cleaning = bool(_bool(config, "ENABLE_CACHE_CLEANING"))
    lines.append(f"Cache Cleaning is {_state(cleaning)} {where}")
    inference = _bool(config, "INFERENCE_MODE")
    inference_mode = True if inference is None else inference
    lines.append(f"Inference Mode is {_state(inference_mode)} {where}")
    disable_cudnn = _bool(config, "DISABLE_CUDNN")
    lines.append(f"cuDNN is {_state(not disable_cudnn)} {where}")
    optional: dict[str, bool | None] = {}
    for key, words in (
        ("ENABLE_TENSOR_FUSER", "Tensor fuser"),
        ("ENABLE_WEIGHT_SHARING", "Weight sharing"),
        ("ENABLE_JIT_PROFILING", "Jit profiling"),
        ("ENABLE_JIT_EXECUTOR", "Jit executor"),
    ):
        optional[key] = value = _bool(config, key)
        if value is not None:
            lines.append(f"{words} is {_state(value)} {where}")
    threads: dict[str, int | None] = {}
    for key, words in (("INTRA_OP_THREAD_COUNT", "Intra"), ("INTER_OP_THREAD_COUNT", "Inter")):
        count = _int(config, key)
        threads[key] = count if count is not None and count > 0 else None
        if threads[key] is not None:
            lines.append(f"{words} op thread count is set to {count} {where}")
    return TorchOptions(
        optimized_execution=optimized,
        inference_mode=inference_mode,
        cudnn=not disable_cudnn,
        cache_cleaning=cleaning,
        weight_sharing=bool(optional["ENABLE_WEIGHT_SHARING"]),
        tensor_fuser=optional["ENABLE_TENSOR_FUSER"],
        jit_profiling=optional["ENABLE_JIT_PROFILING"],
        jit_executor=optional["ENABLE_JIT_EXECUTOR"],
        intra_op_threads=threads["INTRA_OP_THREAD_COUNT"],
        inter_op_threads=threads["INTER_OP_THREAD_COUNT"],
        lines=tuple(lines),
    )
