"""The PyTorch backend's config rules (naming conventions, parameters) and the missing-
extra error: pure functions, no torch needed (pytorch_backend r24.10's texts)."""

from __future__ import annotations

import sys

import pytest
from google.protobuf import text_format

from inference import model_config_pb2 as mc
from service.backends.pytorch.naming import (
    Argument,
    input_layout,
    named_index,
    output_positions,
)
from service.backends.pytorch.options import parse_options
from service.backends.registry import BackendUnavailable, get_backend
from service.errors import Internal, InvalidArgument


def _config(text: str) -> mc.ModelConfig:
    config = text_format.Parse(text, mc.ModelConfig())
    config.name = config.name or "m"
    return config


def _tensors(kind: str, *names: str, datatype: str = "TYPE_FP32") -> str:
    return "".join(f'{kind} {{ name: "{n}" data_type: {datatype} dims: [ 4 ] }}\n' for n in names)


def _args(*names: str) -> list[Argument]:
    return [Argument(n, "TensorType") for n in names]


def test_named_index_follows_tritons_digit_rule() -> None:
    assert named_index("INPUT__3") == 3
    assert named_index("OUT__") == 0  # no digits after "__" still passes Triton's check
    assert named_index("INPUT0") is None
    assert named_index("A__B__1") is None  # the text after the first "__" is not all digits


def test_inputs_by_forward_argument_then_index_then_order() -> None:
    by_argument = _config(_tensors("input", "b", "a") + _tensors("output", "OUTPUT__0"))
    assert input_layout(by_argument, _args("a", "b")).positions == {"b": 1, "a": 0}
    by_index = _config(_tensors("input", "X__1", "Y__0") + _tensors("output", "O__0"))
    assert input_layout(by_index, _args("p", "q")).positions == {"X__1": 1, "Y__0": 0}
    by_order = _config(_tensors("input", "INPUTA", "INPUT__1") + _tensors("output", "O__0"))
    assert input_layout(by_order, _args("p", "q")).positions == {"INPUTA": 0, "INPUT__1": 1}


def test_dict_argument_takes_every_input_by_name() -> None:
    config = _config(_tensors("input", "x", "y") + _tensors("output", "O"))
    layout = input_layout(config, [Argument("inputs", "DictType")])
    assert layout.as_dict and set(layout.positions) == {"x", "y"}


def test_outputs_by_index_or_config_order() -> None:
    config = _config(_tensors("input", "I") + _tensors("output", "OUT__1", "OUT__0"))
    assert output_positions(config) == {"OUT__1": (1, "TYPE_FP32"), "OUT__0": (0, "TYPE_FP32")}
    config = _config(_tensors("input", "I") + _tensors("output", "OUT__1", "OUTPUTB"))
    assert output_positions(config) == {"OUT__1": (0, "TYPE_FP32"), "OUTPUTB": (1, "TYPE_FP32")}


def test_refusals_use_tritons_words() -> None:
    config = _config(_tensors("input", "INPUT0", datatype="TYPE_BF16") + _tensors("output", "O"))
    with pytest.raises(Internal, match="unsupported datatype TYPE_BF16 for input 'INPUT0'"):
        input_layout(config, _args("INPUT0"))
    with pytest.raises(InvalidArgument, match="configuration expects 1 inputs, model provides 2"):
        input_layout(config, _args("a", "b"))
    strings = _config(
        "max_batch_size: 4\n"
        + _tensors("input", "S", datatype="TYPE_STRING")
        + _tensors("output", "O")
    )
    with pytest.raises(Internal, match="1 dimensional List of String as input for 'S'"):
        input_layout(strings, [Argument("S", "ListType")])
    state = _config(
        _tensors("input", "x")
        + _tensors("output", "O__0")
        + 'sequence_batching { state [ { input_name: "S__1" output_name: "SO__1" '
        "data_type: TYPE_FP32 dims: [ 1 ] } ] }"
    )
    with pytest.raises(InvalidArgument, match="not all inputs and outputs follow"):
        input_layout(state, _args("x", "s"))


def test_parameters() -> None:
    config = _config(
        'parameters { key: "INFERENCE_MODE" value { string_value: "OFF" } }\n'
        'parameters { key: "DISABLE_OPTIMIZED_EXECUTION" value { string_value: "1" } }\n'
        'parameters { key: "ENABLE_JIT_EXECUTOR" value { string_value: "false" } }'
    )
    options = parse_options(config)
    assert not options.inference_mode and not options.optimized_execution
    assert options.jit_executor is False and options.jit_profiling is None
    assert "Inference Mode is disabled for model instance 'm'" in options.lines
    assert parse_options(_config("")).lines == ()
    bad = _config('parameters { key: "ENABLE_WEIGHT_SHARING" value { string_value: "yes" } }')
    with pytest.raises(InvalidArgument, match="failed to convert 'yes' to boolean value"):
        parse_options(bad)


def test_missing_torch_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch -> ImportError
    monkeypatch.delitem(sys.modules, "service.backends.pytorch.backend", raising=False)
    with pytest.raises(BackendUnavailable, match=r"install the 'torch' extra \(pip install"):
        get_backend("pytorch")
