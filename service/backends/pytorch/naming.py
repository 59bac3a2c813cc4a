"""Triton's PyTorch naming rules: which forward() argument each config tensor feeds, and
which element of forward()'s result each output is (pytorch_backend r24.10, libtorch.cc).

A TorchScript module has positional arguments and positional results, not names, so the
config's names are mapped by convention:

* inputs: all config inputs named like forward()'s arguments (FORWARD_ARGUMENT); else
  all of the form ``<name>__<index>`` (NAMED_INDEX); else the config's order
  (STRICT_CONFIG_ORDERING, with a warning). A forward() of one ``Dict[str, Tensor]``
  argument gets every input by its config name.
* outputs: ``<name>__<index>`` for all, else the config's order.
* sequence controls must be ``<name>__<index>``; with implicit state every input and
  output must be, and each state's names too.

The error texts and their codes are Triton's: a config that breaks a rule fails the load
with the same words.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from inference import model_config_pb2 as mc

from ...errors import Internal, InvalidArgument

__all__ = [
    "TORCH_TYPES",
    "Argument",
    "InputLayout",
    "control_positions",
    "input_layout",
    "named_index",
    "output_positions",
]

log = logging.getLogger(__name__)

#: Config datatypes the backend maps to a torch dtype (TYPE_STRING: lists of str).
TORCH_TYPES = frozenset(
    {
        "TYPE_BOOL",
        "TYPE_UINT8",
        "TYPE_INT8",
        "TYPE_INT16",
        "TYPE_INT32",
        "TYPE_INT64",
        "TYPE_FP16",
        "TYPE_FP32",
        "TYPE_FP64",
    }
)
_DELIMITER = "__"
_Control = mc.ModelSequenceBatching.Control


@dataclass(frozen=True)
class Argument:
    """One forward() argument (``self`` left out): its name and TorchScript type kind."""

    name: str
    kind: str  # "TensorType", "ListType", "DictType", ...


@dataclass(frozen=True)
class InputLayout:
    """Where each config tensor (inputs, controls, states, batch inputs) goes."""

    positions: dict[str, int]  # name -> forward() argument index
    as_dict: bool  # forward() takes one Dict[str, Tensor]: every input by its name
    arguments: int  # forward()'s argument count


def named_index(name: str) -> int | None:
    """The index of ``<name>__<index>`` (None when the name does not follow it). As
    Triton's check: the text after the first ``__`` holds only digits (none reads 0)."""
    at = name.find(_DELIMITER)
    if at < 0:
        return None
    rest = name[at + len(_DELIMITER) :]
    if rest and not rest.isdigit():
        return None
    return int(rest) if rest else 0


def _type_name(data_type: int) -> str:
    return str(mc.DataType.Name(data_type))


def _string_dims_ok(dims: Sequence[int], batching: bool) -> bool:
    return len(dims) + (1 if batching else 0) <= 1


def control_positions(config: mc.ModelConfig) -> dict[str, int]:
    """The sequence controls' argument indices, checked as Triton checks them (before the
    inputs): each control's name must follow ``<name>__<index>``, and a CORRID control's
    datatype must be one torch has."""
    positions: dict[str, int] = {}
    kinds = (
        _Control.CONTROL_SEQUENCE_START,
        _Control.CONTROL_SEQUENCE_END,
        _Control.CONTROL_SEQUENCE_READY,
        _Control.CONTROL_SEQUENCE_CORRID,
    )
    for kind in kinds:
        for control_input in config.sequence_batching.control_input:
            controls = [c for c in control_input.control if c.kind == kind]
            if not controls:
                continue
            name = control_input.name
            index = named_index(name)
            if index is None:
                raise Internal(f"input '{name}' does not follow <name>__<index> naming convention.")
            if kind == _Control.CONTROL_SEQUENCE_CORRID:
                datatype = _type_name(controls[0].data_type)
                if datatype not in TORCH_TYPES:
                    raise Internal(f"input '{name}' type '{datatype}' is not supported by PyTorch.")
            positions[name] = index
            break
    return positions


def _convention(model: str, names: Sequence[str], allowed: Sequence[str] | None, kind: str) -> str:
    """FORWARD_ARGUMENT, NAMED_INDEX or STRICT_CONFIG_ORDERING for ``names``."""
    convention = "NAMED_INDEX"
    if allowed is not None and all(n in allowed for n in names):
        convention = "FORWARD_ARGUMENT"
    if convention == "NAMED_INDEX":
        for name in names:
            if _DELIMITER not in name:
                convention = "STRICT_CONFIG_ORDERING"
                break
            if named_index(name) is None:
                if kind == "input":
                    log.warning(
                        "input '%s' or previous input(s) are neither an input argument to the "
                        "model '%s' nor do they follow the <name>__<index> naming convention. "
                        "Falling back to enforcing strict ordering from model configuration.",
                        name,
                        model,
                    )
                else:
                    log.warning(
                        "output '%s' or previous output(s) of the model '%s' do not follow the "
                        "<name>__<index> naming convention. Falling back to enforcing strict "
                        "ordering from model configuration.",
                        name,
                        model,
                    )
                convention = "STRICT_CONFIG_ORDERING"
                break
    return convention


def _check_states(config: mc.ModelConfig, convention: str, field: str) -> None:
    states = config.sequence_batching.state
    if states and convention != "NAMED_INDEX":
        raise InvalidArgument(
            f"PyTorch model '{config.name}' is using sequence batching with state but not all "
            "inputs and outputs follow the <name>__<index> naming convention. "
        )
    for state in states:
        name = getattr(state, field)
        if named_index(name) is None:
            raise InvalidArgument(
                f"PyTorch model '{config.name}' is using sequence batching with state but "
                f"state '{name}' does not follow the <name>__<index> naming convention. "
            )


def _arguments_allowed(config: mc.ModelConfig, arguments: Sequence[Argument]) -> list[str]:
    """forward()'s argument names, after Triton's checks of their types and count."""
    if any(a.kind == "DictType" for a in arguments[1:]):
        raise Internal(
            "Multiple inputs of kind DictType were detected. Only a single input of type "
            "Dict(str, Tensor) is supported."
        )
    for argument in arguments:
        if argument.kind not in ("TensorType", "ListType"):
            raise Internal(
                f"An input of type '{argument.kind}' was detected in the model. Only a single "
                "input of type Dict(str, Tensor) or input(s) of type Tensor are supported."
            )
    expected = len(config.input) + sum(len(b.target_name) for b in config.batch_input)
    expected += len(control_positions(config)) + len(config.sequence_batching.state)
    if len(arguments) != expected:
        raise InvalidArgument(
            f"unable to load model '{config.name}', configuration expects {expected} inputs, "
            f"model provides {len(arguments)}"
        )
    return [a.name for a in arguments]


def _place(
    positions: dict[str, int], convention: str, allowed: Sequence[str], name: str, index: int
) -> None:
    if convention == "FORWARD_ARGUMENT":
        if name in allowed:
            positions[name] = allowed.index(name)
    elif convention == "NAMED_INDEX":
        positions[name] = named_index(name) or 0
    else:
        positions[name] = index


def _check_string_dims(
    config: mc.ModelConfig, tensor: mc.ModelInput | mc.ModelOutput, kind: str
) -> None:
    dims = list(tensor.reshape.shape) if tensor.HasField("reshape") else list(tensor.dims)
    if not _string_dims_ok(dims, config.max_batch_size > 0):
        raise Internal(
            f"Triton only supports 1 dimensional List of String as {kind} for "
            f"'{tensor.name}' for model '{config.name}'"
        )


def input_layout(config: mc.ModelConfig, arguments: Sequence[Argument]) -> InputLayout:
    """The inputs' places in forward(), or the load's error (Triton's ``ValidateInputs``,
    after the controls' checks). ``arguments``: forward()'s, without ``self``."""
    positions = control_positions(config)
    as_dict = len(arguments) == 1 and arguments[0].kind == "DictType"
    allowed: list[str] = [] if as_dict else _arguments_allowed(config, arguments)
    if not config.input:
        raise Internal("model configuration must contain at least one input, none were specified.")
    names = [i.name for i in config.input]
    convention = _convention(config.name, names, allowed, "input")
    _check_states(config, convention, "input_name")
    for index, tensor in enumerate(config.input):
        if as_dict:
            positions[tensor.name] = index
        else:
            _place(positions, convention, allowed, tensor.name, index)
        datatype = _type_name(tensor.data_type)
        if datatype not in TORCH_TYPES and datatype != "TYPE_STRING":
            raise Internal(
                f"unsupported datatype {datatype} for input '{tensor.name}' for model "
                f"'{config.name}'"
            )
        if datatype == "TYPE_STRING":
            _check_string_dims(config, tensor, "input")
    for index, state in enumerate(config.sequence_batching.state):
        if as_dict:
            positions[state.input_name] = index
        else:
            _place(positions, convention, allowed, state.input_name, index)
        datatype = _type_name(state.data_type)
        if datatype not in TORCH_TYPES and datatype != "TYPE_STRING":
            raise Internal(
                f"unsupported datatype {datatype} for input state '{state.input_name}' for "
                f"model '{config.name}'"
            )
    index = len(config.input)
    for batch_input in config.batch_input:
        for target in batch_input.target_name:
            if as_dict:
                positions[target] = index
            else:
                _place(positions, convention, allowed, target, index)
            index += 1
    return InputLayout(positions, as_dict, len(arguments))


def output_positions(config: mc.ModelConfig) -> dict[str, tuple[int, str]]:
    """Each output's (and output state's) index in forward()'s result and its config
    datatype, or the load's error (Triton's ``ValidateOutputs``)."""
    if not config.output:
        raise Internal("model configuration must contain at least one output, none were specified.")
    convention = _convention(config.name, [o.name for o in config.output], None, "output")
    _check_states(config, convention, "output_name")
    positions: dict[str, tuple[int, str]] = {}
    for index, tensor in enumerate(config.output):
        place = (named_index(tensor.name) or 0) if convention == "NAMED_INDEX" else index
        datatype = _type_name(tensor.data_type)
        if datatype not in TORCH_TYPES and datatype != "TYPE_STRING":
            raise Internal(
                f"unsupported datatype {datatype} for output '{tensor.name}' for model "
                f"'{config.name}'"
            )
        if datatype == "TYPE_STRING":
            _check_string_dims(config, tensor, "output")
        positions[tensor.name] = (place, datatype)
    for state in config.sequence_batching.state:
        datatype = _type_name(state.data_type)
        if datatype not in TORCH_TYPES and datatype != "TYPE_STRING":
            raise Internal(
                f"unsupported datatype {datatype} for state '{state.output_name}' for model "
                f"'{config.name}'"
            )
        if datatype == "TYPE_STRING" and not _string_dims_ok(
            list(state.dims), config.max_batch_size > 0
        ):
            raise Internal(
                "Triton only supports 1 dimensional List of String as output for "
                f"'{state.output_name}' for model '{config.name}'"
            )
        positions[state.output_name] = (named_index(state.output_name) or 0, datatype)
    return positions
