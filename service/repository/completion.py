"""Completing a config from the model file's own signature, and checking the two agree.

This mirrors Triton's auto-complete: a backend reports the tensors its model file
declares (full shapes, ``-1`` for dynamic dims) and this module fills what the config
left out, then refuses a config that contradicts the file.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from inference import model_config_pb2 as mc
from wire import datatypes

from ..types import TensorSpec
from .config_file import ConfigError

__all__ = [
    "DEFAULT_MAX_BATCH_SIZE",
    "ModelSignature",
    "check_against_signature",
    "check_ragged_inputs",
    "check_scalar",
    "complete",
    "config_shape",
    "internal_inputs",
    "internal_outputs",
    "internal_tensors",
]

# Triton's default for models whose every tensor has a dynamic first dimension.
DEFAULT_MAX_BATCH_SIZE = 4


@dataclass(frozen=True)
class ModelSignature:
    inputs: Sequence[TensorSpec]
    outputs: Sequence[TensorSpec]

    @property
    def batchable(self) -> bool:
        tensors = [*self.inputs, *self.outputs]
        return bool(tensors) and all(t.shape and t.shape[0] == -1 for t in tensors)


def internal_inputs(config: mc.ModelConfig) -> set[str]:
    """Inputs the server fills itself (sequence controls, implicit state, batch inputs),
    never clients."""
    batching = config.sequence_batching
    return (
        {c.name for c in batching.control_input}
        | {s.input_name for s in batching.state}
        | {t for b in config.batch_input for t in b.target_name}
    )


def internal_outputs(config: mc.ModelConfig) -> set[str]:
    return {s.output_name for s in config.sequence_batching.state}


def _control_datatype(control: mc.ModelSequenceBatching.Control) -> str:
    if control.kind == mc.ModelSequenceBatching.Control.CONTROL_SEQUENCE_CORRID:
        return datatypes.datatype_from_config(mc.DataType.Name(control.data_type))
    if control.fp32_false_true:
        return "FP32"
    return "INT32" if control.int32_false_true else "BOOL"


def _unchecked_dims(config: mc.ModelConfig) -> set[str]:
    """Tensors whose config dims say what clients see, not what the model declares: ragged
    inputs (the model gets them flat) and batch outputs (scattered by input shapes)."""
    return {i.name for i in config.input if i.allow_ragged_batch} | {
        t for b in config.batch_output for t in b.target_name
    }


def internal_tensors(config: mc.ModelConfig) -> tuple[list[TensorSpec], list[TensorSpec]]:
    """The tensors the sequence batcher adds (inputs) and takes back (outputs), shaped as
    Triton feeds them: a control is ``[1]``, a state has its ``dims``; batch dim first
    when the model batches. Request backends declare these as their own."""
    batch = (-1,) if config.max_batch_size > 0 else ()
    batching = config.sequence_batching
    inputs = [
        TensorSpec(c.name, _control_datatype(c.control[0]), (*batch, 1))
        for c in batching.control_input
        if c.control
    ]
    outputs = []
    for state in batching.state:
        datatype = datatypes.datatype_from_config(mc.DataType.Name(state.data_type))
        inputs.append(TensorSpec(state.input_name, datatype, (*batch, *state.dims)))
        outputs.append(TensorSpec(state.output_name, datatype, (*batch, *state.dims)))
    return inputs, outputs


def complete(
    config: mc.ModelConfig,
    signature: ModelSignature,
    default_max_batch_size: int = DEFAULT_MAX_BATCH_SIZE,
) -> None:
    """Fill max_batch_size, inputs and outputs where the config has none (in place).
    ``default_max_batch_size``: Triton's ``--backend-config default-max-batch-size``."""
    if config.max_batch_size == 0 and not config.input and signature.batchable:
        config.max_batch_size = default_max_batch_size
    batched = config.max_batch_size > 0
    if not config.input:
        skip = internal_inputs(config)
        for spec in signature.inputs:
            if spec.name not in skip:
                _fill(config.input.add(), spec, batched)
    if not config.output:
        skip = internal_outputs(config)
        for spec in signature.outputs:
            if spec.name not in skip:
                _fill(config.output.add(), spec, batched)


def _fill(tensor: mc.ModelInput | mc.ModelOutput, spec: TensorSpec, batched: bool) -> None:
    tensor.name = spec.name
    tensor.data_type = mc.DataType.Value(datatypes.config_type_for(spec.datatype))  # type: ignore[assignment]
    dims = spec.shape[1:] if batched else spec.shape
    if dims:
        tensor.dims.extend(dims)
    else:
        # A tensor that is only the batch dimension: clients see [batch, 1], the model [batch].
        tensor.dims.append(1)
        tensor.reshape.SetInParent()


def check_against_signature(config: mc.ModelConfig, signature: ModelSignature) -> None:
    """Raise ConfigError naming the first tensor where config and model file disagree."""
    batched = config.max_batch_size > 0
    model_inputs = {t.name: t for t in signature.inputs}
    model_outputs = {t.name: t for t in signature.outputs}
    loose = _unchecked_dims(config)
    for kind, tensors, known in (
        ("input", config.input, model_inputs),
        ("output", config.output, model_outputs),
    ):
        for tensor in tensors:
            spec = known.get(tensor.name)
            if spec is None:
                raise ConfigError(
                    f"unexpected {kind} '{tensor.name}' in config, the model's {kind}s are: "
                    + ", ".join(sorted(known))
                )
            if not spec.shape and tensor.name not in loose:  # a scalar in the model file
                check_scalar(config.name, tensor)
                _check_tensor(kind, tensor, spec, batched, dims_too=False)
            else:
                _check_tensor(kind, tensor, spec, batched, tensor.name not in loose)
    configured = {t.name for t in config.input} | internal_inputs(config)
    missing = [name for name in model_inputs if name not in configured]
    sequence = config.sequence_batching
    controls = [c.name for c in sequence.control_input] + [s.input_name for s in sequence.state]
    unknown = [n for n in controls if n not in model_inputs] + [
        n for n in internal_outputs(config) if n not in model_outputs
    ]
    if unknown:
        raise ConfigError(
            "sequence_batching names tensors the model does not have: " + ", ".join(unknown)
        )
    if missing:
        raise ConfigError("model inputs missing from config: " + ", ".join(missing))


def config_shape(tensor: mc.ModelInput | mc.ModelOutput) -> list[int]:
    """The shape the model itself sees (without the batch dimension): the reshape when
    the config has one, else the dims."""
    return list(tensor.reshape.shape) if tensor.HasField("reshape") else list(tensor.dims)


def check_scalar(model: str, tensor: mc.ModelInput | mc.ModelOutput) -> None:
    """A tensor the model file declares with no dimensions (a scalar, or a value of no
    known rank) takes any config shape of 1s, as Triton's ONNX Runtime backend allows
    (ValidateInputs / ValidateOutputs, its text): the backend feeds the value as a
    scalar and gives a scalar result the config's shape."""
    dims = config_shape(tensor)
    if any(d != 1 for d in dims):
        raise ConfigError(
            f"unable to load model '{model}', scalar tensor '{tensor.name}', should only "
            "provide 1 in the model configuration when the model doesn't support batching. "
            f"Model configuration provided: {_fmt(dims)}."
        )


def check_ragged_inputs(config: mc.ModelConfig, signature: ModelSignature) -> None:
    """A tensor backend gets a ragged input flat: the model must take shape ``[-1]``
    (the ONNX Runtime backend's rule and texts; not for optional inputs)."""
    declared = {t.name: t for t in signature.inputs}
    for tensor in config.input:
        if not tensor.allow_ragged_batch:
            continue
        if tensor.optional:
            raise ConfigError(
                f"unable to load model '{config.name}', configuration expects model provides "
                f"input with shape [-1] for ragged input '{tensor.name}', which is not "
                "supported for optional input"
            )
        spec = declared.get(tensor.name)
        if spec is not None and tuple(spec.shape) != (-1,):
            raise ConfigError(
                f"unable to load model '{config.name}', configuration expects model provides "
                f"input with shape [-1]  for ragged input '{tensor.name}', model provides "
                f"{_fmt(spec.shape)}"
            )


def _check_tensor(
    kind: str,
    tensor: mc.ModelInput | mc.ModelOutput,
    spec: TensorSpec,
    batched: bool,
    dims_too: bool = True,
) -> None:
    """``dims_too``: compare the shapes as well as the datatypes."""
    datatype = datatypes.datatype_from_config(mc.DataType.Name(tensor.data_type))
    if datatype != spec.datatype:
        raise ConfigError(
            f"{kind} '{tensor.name}' has data type {datatype} in config, "
            f"but the model declares {spec.datatype}"
        )
    if not dims_too:
        return
    expected = ([-1] if batched else []) + config_shape(tensor)
    if len(expected) != len(spec.shape):
        raise ConfigError(
            f"{kind} '{tensor.name}' has {len(expected)} dimensions with max_batch_size "
            f"{'> 0' if batched else '0'} in config, but the model declares shape "
            f"{_fmt(spec.shape)}"
        )
    if batched and spec.shape[0] != -1:
        raise ConfigError(
            f"{kind} '{tensor.name}': max_batch_size > 0 needs a dynamic first dimension, "
            f"the model declares shape {_fmt(spec.shape)}"
        )
    for ours, theirs in zip(expected, spec.shape, strict=True):
        if ours != -1 and theirs != -1 and ours != theirs:
            raise ConfigError(
                f"{kind} '{tensor.name}' has dims {_fmt(expected)} in config, "
                f"but the model declares shape {_fmt(spec.shape)}"
            )


def _fmt(shape: Sequence[int]) -> str:
    return "[" + ",".join(str(d) for d in shape) + "]"
