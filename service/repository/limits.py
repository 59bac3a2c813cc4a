"""What a model config may ask for, checked before anything is built from it.

Loading must stay bounded in time and memory whatever the config says (it may come from
a load request): each numeric field that loading turns into work or memory has a bound,
named in the error with its value; those in ``ConfigLimits`` can be raised by a flag. A
config out of bounds is a load failure of each version (INVALID_ARGUMENT for a load
request, naming the bound), found before any instance is made.
Model file names must stay inside the version folder: a name is joined to the folder
path, and pathlib drops the folder for an absolute name. Dynamic-batching fields (queue
sizes, priority levels, delays) are the dynamic batcher's to check.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from inference import model_config_pb2 as mc

from .batch_config import check_batch_io
from .config_file import ConfigError

__all__ = [
    "DEFAULT_MAX_INSTANCES",
    "MAX_RANK",
    "MAX_SEQUENCE_SLOTS",
    "MAX_STATE_ELEMENTS",
    "MAX_THREADS",
    "MAX_WARMUP_BYTES",
    "MAX_WARMUP_COUNT",
    "MAX_WARMUP_ROWS",
    "ConfigLimits",
    "check_config",
    "load_refusal",
]

#: --max-instances-per-model's default: far above any real deployment on one host.
DEFAULT_MAX_INSTANCES = 1024
#: Sequence slots of one model (instances x slots per instance); each is a table entry.
MAX_SEQUENCE_SLOTS = 1 << 20
#: numpy's (and so every tensor's here) maximum number of dimensions.
MAX_RANK = 64
#: Elements of one sequence state tensor (1 GiB as FP32): every sequence gets a copy.
MAX_STATE_ELEMENTS = 1 << 28
#: ONNX Runtime threads an instance may ask for (intra_op / inter_op_thread_count).
MAX_THREADS = 1024
#: A warmup sample's data (every row, every input) is built in memory before it runs.
MAX_WARMUP_BYTES = 1 << 30
#: Runs of one warmup sample, and its requests: each instance runs them before READY.
MAX_WARMUP_COUNT = 1 << 16
MAX_WARMUP_ROWS = 1 << 16
_INT64_MAX = (1 << 63) - 1
_DATATYPE_BYTES = {
    mc.TYPE_BOOL: 1,
    mc.TYPE_UINT8: 1,
    mc.TYPE_INT8: 1,
    mc.TYPE_UINT16: 2,
    mc.TYPE_INT16: 2,
    mc.TYPE_FP16: 2,
    mc.TYPE_BF16: 2,
    mc.TYPE_UINT64: 8,
    mc.TYPE_INT64: 8,
    mc.TYPE_FP64: 8,
}  # 4 bytes otherwise (and per STRING element, its length prefix)
_THREAD_PARAMETERS = ("intra_op_thread_count", "inter_op_thread_count")


@dataclass(frozen=True)
class ConfigLimits:
    max_instances: int = DEFAULT_MAX_INSTANCES  # --max-instances-per-model


def check_config(config: mc.ModelConfig) -> None:
    """Triton's rules checked where Triton validates a config, before any version loads
    (its repository poll): raises ConfigError."""
    if config.max_batch_size < 0:
        raise ConfigError(f"'max_batch_size' must be non-negative value for {config.name}")
    if config.platform == "ensemble" and config.model_warmup:
        raise ConfigError(f"model_warmup can not be specified for ensemble '{config.name}'")


def load_refusal(config: mc.ModelConfig, limits: ConfigLimits) -> str | None:
    """Why no version of ``config`` may be loaded (None: it may): a field out of its
    bound, Triton's tensor shape rules (checked when a model loads, as Triton does with
    auto-complete), a model file outside the version folder. Checked before anything is
    built, so a refused load costs nothing; the version becomes UNAVAILABLE with it."""
    try:
        _check_bounds(config, limits)
    except ConfigError as exc:
        return str(exc)
    return None


def _check_bounds(config: mc.ModelConfig, limits: ConfigLimits) -> None:
    name = config.name
    instances = sum(_group_instances(group) for group in config.instance_group) or 1
    if instances > limits.max_instances:
        raise ConfigError(
            f"instance_group of model '{name}' asks for {instances} instances, more than the "
            f"limit of {limits.max_instances} (--max-instances-per-model)"
        )
    for key in _THREAD_PARAMETERS:
        text = config.parameters[key].string_value if key in config.parameters else ""
        if text.strip().lstrip("+-").isdigit() and not 0 <= int(text) <= MAX_THREADS:
            raise ConfigError(
                f"parameter '{key}' of model '{name}' is {int(text)}, outside the range "
                f"0..{MAX_THREADS}"
            )
    for io in config.input:
        _check_dims(f"model input '{io.name}' ", io.dims, io.reshape.shape, io.HasField("reshape"))
    for out in config.output:
        _check_dims(
            f"model output '{out.name}' ", out.dims, out.reshape.shape, out.HasField("reshape")
        )
    check_batch_io(config)
    if config.HasField("sequence_batching"):
        _check_sequences(config, instances)
    _check_warmup(config)
    _check_file_names(config)


def _check_warmup(config: mc.ModelConfig) -> None:
    """Bounds on what warmup builds and runs; the samples' own faults (a variable
    dimension, a missing file) are reported in Triton's words when they are built."""
    for sample in config.model_warmup:
        where = f"model_warmup '{sample.name}' of model '{config.name}'"
        if sample.count > MAX_WARMUP_COUNT or sample.batch_size > MAX_WARMUP_ROWS:
            raise ConfigError(
                f"{where} asks for count {sample.count} and batch_size {sample.batch_size}; "
                f"each may be at most {MAX_WARMUP_COUNT}"
            )
        row = 0
        for name, given in sample.inputs.items():
            if len(given.dims) > MAX_RANK:
                raise ConfigError(f"{where}: input '{name}' has more than {MAX_RANK} dimensions")
            size = _DATATYPE_BYTES.get(given.data_type, 4)
            row += _fixed_elements(given.dims) * size
        if row * sample.batch_size > MAX_WARMUP_BYTES:
            raise ConfigError(
                f"{where} needs {row * sample.batch_size} bytes of data, more than the "
                f"limit of {MAX_WARMUP_BYTES}"
            )


def _group_instances(group: mc.ModelInstanceGroup) -> int:
    """A KIND_GPU group makes ``count`` instances on each of its GPUs, as in Triton."""
    gpus = len(group.gpus) if group.kind == mc.ModelInstanceGroup.KIND_GPU else 0
    return max(group.count, 1) * max(gpus, 1)


def _check_dims(
    prefix: str, dims: Sequence[int], reshape: Sequence[int], has_reshape: bool
) -> None:
    """Triton's rule (each dim >= 1, or -1 for variable), plus what a tensor can hold."""
    shapes = [("", dims), ("reshape ", reshape)] if has_reshape else [("", dims)]
    for kind, shape in shapes:
        if any(d < 1 and d != -1 for d in shape):
            what = "reshape dimensions must be" if kind else "dimension must be"
            raise ConfigError(
                f"{prefix}{what} integer >= 1, or -1 to indicate a variable-size dimension"
            )
        if len(shape) > MAX_RANK:
            raise ConfigError(
                f"{prefix}has {len(shape)} {kind}dimensions, more than the {MAX_RANK} a tensor "
                "can have"
            )
        if _fixed_elements(shape) > _INT64_MAX:
            raise ConfigError(f"{prefix}{kind}dims {list(shape)} hold more than 2^63-1 elements")


def _fixed_elements(shape: Sequence[int]) -> int:
    count = 1
    for dim in shape:
        count *= max(dim, 1)
    return count


def _check_sequences(config: mc.ModelConfig, instances: int) -> None:
    batching = config.sequence_batching
    name = config.name
    rows = max(config.max_batch_size, 1)
    per_instance = rows
    if batching.WhichOneof("strategy_choice") == "oldest":
        candidates = batching.oldest.max_candidate_sequences
        if candidates < 0:
            raise ConfigError(
                f"sequence batching 'max_candidate_sequences' must be non-negative for {name}"
            )
        per_instance = candidates or rows
    slots = instances * per_instance
    if slots > MAX_SEQUENCE_SLOTS:
        raise ConfigError(
            f"sequence batching of model '{name}' needs {slots} sequence slots ({instances} "
            f"instances x {per_instance}), more than the limit of {MAX_SEQUENCE_SLOTS}"
        )
    for state in batching.state:
        prefix = f"sequence state '{state.input_name}' "
        _check_dims(prefix, state.dims, [], False)
        shapes: list[Sequence[int]] = [state.dims, *(i.dims for i in state.initial_state)]
        for index, shape in enumerate(shapes):
            if index:
                _check_dims(f"{prefix}initial_state ", shape, [], False)
            elements = _fixed_elements(shape)
            if elements > MAX_STATE_ELEMENTS:
                raise ConfigError(
                    f"{prefix}of model '{name}' holds {elements} elements per sequence, more "
                    f"than the limit of {MAX_STATE_ELEMENTS}"
                )


def _check_file_names(config: mc.ModelConfig) -> None:
    """A model file is always a relative path inside the version folder."""
    names = [("default_model_filename", config.default_model_filename)]
    names += [(f"cc_model_filenames['{k}']", v) for k, v in config.cc_model_filenames.items()]
    for field, value in names:
        if not value:
            continue
        parts = value.replace("\\", "/").split("/")
        if value.startswith(("/", "\\")) or "\x00" in value or ".." in parts:
            raise ConfigError(
                f"{field} '{value}' of model '{config.name}' must name a file inside the "
                "version folder: no absolute path, no '..'"
            )
