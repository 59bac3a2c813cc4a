"""The OpenVINO backend's rules as Triton's openvino_backend (r24.10) applies them: its
model ``parameters``, the datatypes it maps, the shape check between config and model,
and the batch it executes. Pure functions (no openvino import); the error texts and their
codes are Triton's, so that a config that breaks a rule fails the same way.

Triton's batching is the backend's own: with ``max_batch_size > 0`` the model's batch
dimension is fixed to ``max_batch_size`` (``ov::set_batch``), and an execution whose batch
is smaller fails unless ``ENABLE_BATCH_PADDING`` is ``YES``, which pads it with zeros.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from inference import model_config_pb2 as mc

from ...errors import Internal, InvalidArgument

__all__ = [
    "OV_TYPES",
    "Dim",
    "ModelOptions",
    "batch_error",
    "check_allowed",
    "compare_dims",
    "config_dims",
    "datatype_error",
    "device_properties",
    "model_options",
    "reshaped",
]

#: Config datatypes the backend maps to an OpenVINO element type (its
#: ``ModelConfigDataTypeToOpenVINOElement``); any other one fails the load.
OV_TYPES = frozenset(
    {
        "TYPE_BOOL",
        "TYPE_UINT8",
        "TYPE_UINT16",
        "TYPE_UINT32",
        "TYPE_UINT64",
        "TYPE_INT8",
        "TYPE_INT16",
        "TYPE_INT32",
        "TYPE_INT64",
        "TYPE_FP16",
        "TYPE_FP32",
    }
)

#: A model dimension: (min, max), equal for a static one; max -1 when unbounded.
Dim = tuple[int, int]


@dataclass(frozen=True)
class ModelOptions:
    """The model-level parameters (Triton's ``ParseParameters()``): booleans are true
    only for ``YES`` in any case; any other word leaves them false, without an error."""

    cpu_extension: str | None = None  # CPU_EXTENSION_PATH
    skip_dynamic_batchsize: bool = False  # SKIP_OV_DYNAMIC_BATCHSIZE
    batch_padding: bool = False  # ENABLE_BATCH_PADDING
    reshape_io_layers: bool = False  # RESHAPE_IO_LAYERS


def _param(config: mc.ModelConfig, key: str) -> str:
    return config.parameters[key].string_value if key in config.parameters else ""


def model_options(config: mc.ModelConfig) -> ModelOptions:
    def yes(key: str) -> bool:
        return _param(config, key).lower() == "yes"

    return ModelOptions(
        cpu_extension=_param(config, "CPU_EXTENSION_PATH") or None,
        skip_dynamic_batchsize=yes("SKIP_OV_DYNAMIC_BATCHSIZE"),
        batch_padding=yes("ENABLE_BATCH_PADDING"),
        reshape_io_layers=yes("RESHAPE_IO_LAYERS"),
    )


#: The CPU device's parameters, in the order Triton reads them.
_DEVICE_KEYS = (
    "INFERENCE_NUM_THREADS",
    "COMPILATION_NUM_THREADS",
    "HINT_BF16",
    "NUM_STREAMS",
    "PERFORMANCE_HINT",
)


def device_properties(config: mc.ModelConfig) -> list[tuple[str, str | int]]:
    """The CPU device's properties (Triton's ``ParseParameters(device)``), as
    (OpenVINO property, value): ints for counts, upper-case words otherwise. A value Triton
    refuses raises InvalidArgument with its text (values are compared in lower case)."""
    properties: list[tuple[str, str | int]] = []
    for key in _DEVICE_KEYS:
        value = _param(config, key).lower()
        if not value:
            continue
        if key in ("INFERENCE_NUM_THREADS", "COMPILATION_NUM_THREADS"):
            if not value.isdigit():
                raise InvalidArgument(
                    f"expected the parameter '{key}' to be a non-negative number, got {value}"
                )
            properties.append((key, int(value)))
        elif key == "HINT_BF16":
            if value != "yes":
                raise InvalidArgument(f"expected the parameter '{key}' to be YES, got {value}")
            properties.append(("INFERENCE_PRECISION_HINT", "bf16"))
        elif key == "NUM_STREAMS":
            if value in ("auto", "numa"):
                properties.append((key, value.upper()))
            elif value.isdigit():
                properties.append((key, int(value)))
            else:
                raise InvalidArgument(
                    f"expected the parameter '{key}' to be either AUTO/NUMA/<int_value>, "
                    f"got {value}"
                )
        elif value in ("latency", "throughput", "cumulative_throughput"):
            properties.append((key, value.upper()))
        else:
            raise InvalidArgument(
                f"expected the parameter '{key}' to be LATENCY/THROUGHPUT/"
                f"CUMULATIVE_THROUGHPUT, got {value}"
            )
    return properties


def datatype_error(
    model: str, kind: str, tensor: mc.ModelInput | mc.ModelOutput
) -> Internal | None:
    """Triton's load error for a tensor of a datatype the backend cannot map."""
    datatype = mc.DataType.Name(tensor.data_type)
    if datatype in OV_TYPES:
        return None
    return Internal(
        f"unsupported datatype {datatype} for {kind} '{tensor.name}' for model '{model}'"
    )


def reshaped(shape: Sequence[Dim], dims: Sequence[int], max_batch_size: int) -> list[int]:
    """RESHAPE_IO_LAYERS: the input's new shape (-1 dynamic), the config's dims after the
    model's batch dimension when batching."""
    new = [low if low == high else -1 for low, high in shape]
    start = 1 if max_batch_size > 0 else 0
    for offset, dim in enumerate(dims):
        if dim != -1 and dim <= 0:
            raise Internal(
                "openvino backend does not support dimensions values other than `-1` or "
                "positive integers"
            )
        if start + offset < len(new):
            new[start + offset] = dim
        else:
            new.append(dim)
    return new


def check_allowed(kind: str, name: str, allowed: Sequence[str]) -> None:
    """A config tensor the model does not have (the backend API's ``CheckAllowedModel*``)."""
    if name not in allowed:
        raise InvalidArgument(
            f"unexpected inference {kind} '{name}', allowed {kind}s are: "
            + ", ".join(sorted(allowed))
        )


def config_dims(tensor: mc.ModelInput | mc.ModelOutput) -> list[int]:
    """The dims the model is checked against: the reshape's when the config has one."""
    return list(tensor.reshape.shape) if tensor.HasField("reshape") else list(tensor.dims)


def _shape_text(shape: Sequence[int]) -> str:
    return "[" + ",".join(str(d) for d in shape) + "]"


def _matches(dim: Dim, wanted: int) -> bool:
    """Triton's ``doesMatch``: a bounded dynamic dimension takes values strictly inside."""
    low, high = dim
    if low == high:
        return low == wanted
    if high == -1:
        return True
    return low < wanted < high


def compare_dims(
    model: str,
    tensor: str,
    shape: Sequence[Dim],
    dims: Sequence[int],
    max_batch_size: int,
    exact: bool,
) -> None:
    """Triton's ``CompareDimsSupported``: the config's dims against the model's shape.
    With batching the batch dimension is compared only when ``exact`` (outputs), and a
    config -1 matches any model dimension for inputs."""
    signed = [low if low == high else -1 for low, high in shape]
    if max_batch_size > 0:
        if not shape:
            raise InvalidArgument(
                f"model '{model}', tensor '{tensor}': for the model to support batching the "
                "shape should have at least 1 dimension"
            )
        full = [max_batch_size, *dims]
        ok = len(shape) == len(full) and all(
            _matches(shape[i], full[i])
            for i in range(len(full))
            if exact or (i != 0 and full[i] != -1)
        )
        if not ok:
            raise InvalidArgument(
                f"model '{model}', tensor '{tensor}': the model expects {len(shape)} dimensions "
                f"(shape {_shape_text(signed)}) but the model configuration specifies "
                f"{len(full)} dimensions (an initial batch dimension because max_batch_size "
                "> 0 followed by the explicit tensor shape, making complete shape "
                f"{_shape_text(full)})"
            )
        return
    ok = len(shape) == len(dims) and all(_matches(d, w) for d, w in zip(shape, dims, strict=False))
    if not ok:
        raise InvalidArgument(
            f"model '{model}', tensor '{tensor}': the model expects {len(shape)} dimensions "
            f"(shape {_shape_text(signed)}) but the model configuration specifies {len(dims)} "
            f"dimensions (shape {_shape_text(dims)})"
        )


def batch_error(max_batch_size: int, batch: int) -> Internal:
    """An execution whose batch is not ``max_batch_size``, without ENABLE_BATCH_PADDING."""
    return Internal(
        f"expected requests with batch size '{max_batch_size}', got '{batch}'... this error "
        "can be avoided by setting 'ENABLE_BATCH_PADDING' parameter in model configuration "
        "to 'YES' at a performance cost."
    )
