"""The TensorFlow backend's rules (parameters, signature choice, datatypes, shapes) and the
missing-extra error: pure functions, no TensorFlow needed (tensorflow_backend r24.10)."""

from __future__ import annotations

import sys

import pytest
from google.protobuf import text_format

from inference import model_config_pb2 as mc
from service.backends.registry import BackendUnavailable, get_backend
from service.backends.tensorflow.rules import (
    SignatureTensor,
    check_config,
    choose_signature,
    datatype_of,
    parse_options,
    tensor_spec,
)
from service.errors import Internal, InvalidArgument


def _config(text: str) -> mc.ModelConfig:
    config = text_format.Parse(text, mc.ModelConfig())
    config.name = config.name or "m"
    return config


def _param(key: str, value: str) -> str:
    return f'parameters: {{ key: "{key}" value: {{ string_value: "{value}" }} }}\n'


def test_signature_default_explicit_and_fallback() -> None:
    keys = ["__saved_model_init_op", "serving_default", "triple"]
    assert choose_signature("m", keys, "").key == "serving_default"
    assert choose_signature("m", keys, "triple").key == "triple"
    fallback = choose_signature("m", ["__saved_model_init_op", "predict"], "")
    assert fallback.key == "predict"
    assert fallback.warnings == (
        "unable to find serving signature 'serving_default",  # Triton's text, quote unclosed
        "using signature 'predict'",
    )
    with pytest.raises(Internal, match="unable to load model 'm', expected 'nope' signature"):
        choose_signature("m", keys, "nope")  # an explicit name never falls back
    with pytest.raises(Internal, match="expected 'serving_default' signature"):
        choose_signature("m", ["__saved_model_init_op", "__saved_model_train_op"], "")


def test_parameters_and_their_checks() -> None:
    options = parse_options(
        _config(
            _param("TF_SIGNATURE_DEF", "triple")
            + _param("TF_GRAPH_TAG", "gpu")
            + _param("TF_NUM_INTRA_THREADS", "3")
            + _param("TF_USE_PER_SESSION_THREADS", "off")
        )
    )
    assert (options.signature_def, options.graph_tag) == ("triple", "gpu")
    assert (options.intra_op_threads, options.inter_op_threads) == (3, 0)
    assert options.per_session_threads is False
    assert parse_options(_config("")).per_session_threads is True
    with pytest.raises(InvalidArgument, match="'TF_NUM_INTRA_THREADS' must be non-negative"):
        parse_options(_config(_param("TF_NUM_INTRA_THREADS", "-1")))
    with pytest.raises(InvalidArgument, match="'MAX_SESSION_SHARE_COUNT' must be positive"):
        parse_options(_config(_param("MAX_SESSION_SHARE_COUNT", "0")))
    with pytest.raises(InvalidArgument, match="failed to convert 'x' to integral number"):
        parse_options(_config(_param("TF_NUM_INTER_THREADS", "x")))


def test_datatypes_and_shapes() -> None:
    assert datatype_of("m", "input", "X", "DT_HALF") == "FP16"
    assert datatype_of("m", "output", "Y", "DT_STRING") == "BYTES"
    with pytest.raises(Internal, match="unable to process input 'X' for 'm', unsupported"):
        datatype_of("m", "input", "X", "DT_COMPLEX64")
    known = SignatureTensor("INPUT0", "serving_default_INPUT0:0", "FP32", (-1, 4))
    assert tensor_spec(known, [], True).shape == (-1, 4)
    assert tensor_spec(known, [], True).name == "INPUT0"  # the key, not the graph tensor
    # Unknown rank: the config's shape, batch dimension first, as Triton fills it.
    unknown = SignatureTensor("X", "x:0", "INT32", None)
    config = _config('input { name: "X" data_type: TYPE_INT32 dims: [ 2, 3 ] }')
    assert tensor_spec(unknown, config.input, True).shape == (-1, 2, 3)
    assert tensor_spec(unknown, config.input, False).shape == (2, 3)


def test_config_names_and_datatypes_against_the_signature() -> None:
    inputs = [
        SignatureTensor("INPUT0", "serving_default_INPUT0:0", "FP32", (-1, 4)),
        SignatureTensor("TEXT", "serving_default_TEXT:0", "BYTES", (-1,)),
    ]
    outputs = [SignatureTensor("OUTPUT0", "Identity:0", "FP32", (-1, 4))]
    check_config(
        _config(
            'input { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }\n'
            'input { name: "TEXT" data_type: TYPE_STRING dims: [ 1 ] }\n'
            'output { name: "OUTPUT0" }'  # no datatype yet: auto-complete fills it
        ),
        inputs,
        outputs,
    )
    with pytest.raises(
        InvalidArgument,
        match="unable to load model 'm', configuration expects datatype TYPE_INT32 for input "
        "'INPUT0', model provides TYPE_FP32",
    ):
        check_config(_config('input { name: "INPUT0" data_type: TYPE_INT32 }'), inputs, outputs)
    with pytest.raises(
        InvalidArgument,
        match="unexpected inference input 'serving_default_INPUT0:0', allowed inputs are: "
        "INPUT0, TEXT",
    ):
        check_config(_config('input { name: "serving_default_INPUT0:0" }'), inputs, outputs)
    with pytest.raises(InvalidArgument, match=r"allowed outputs are: OUTPUT0$"):
        check_config(_config('output { name: "OUT" }'), inputs, outputs)


def test_missing_tensorflow_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tensorflow", None)  # import tensorflow -> ImportError
    monkeypatch.delitem(sys.modules, "service.backends.tensorflow.backend", raising=False)
    with pytest.raises(
        BackendUnavailable, match=r"TensorFlow is not installed .*install the 'tensorflow' extra"
    ):
        get_backend("tensorflow")
