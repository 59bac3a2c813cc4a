"""The OpenVINO backend's config rules (parameters, datatypes, shape checks, the fixed
batch) and the missing-extra error: pure functions, no openvino needed (openvino_backend
r24.10's texts)."""

from __future__ import annotations

import sys

import pytest
from google.protobuf import text_format

from inference import model_config_pb2 as mc
from service.backends.openvino.rules import (
    batch_error,
    check_allowed,
    compare_dims,
    datatype_error,
    device_properties,
    model_options,
    reshaped,
)
from service.backends.registry import BackendUnavailable, get_backend
from service.errors import Internal, InvalidArgument


def _config(*pairs: tuple[str, str]) -> mc.ModelConfig:
    text = "".join(
        f'parameters {{ key: "{k}" value {{ string_value: "{v}" }} }}\n' for k, v in pairs
    )
    config = text_format.Parse(text, mc.ModelConfig())
    config.name = "m"
    return config


def test_model_options_are_true_only_for_yes() -> None:
    options = model_options(
        _config(
            ("SKIP_OV_DYNAMIC_BATCHSIZE", "Yes"),
            ("ENABLE_BATCH_PADDING", "true"),  # Triton reads only YES: stays off, no error
            ("RESHAPE_IO_LAYERS", "YES"),
            ("CPU_EXTENSION_PATH", "/opt/ext.so"),
        )
    )
    assert options.skip_dynamic_batchsize and options.reshape_io_layers
    assert not options.batch_padding
    assert options.cpu_extension == "/opt/ext.so"
    assert model_options(_config()).cpu_extension is None


def test_device_properties_in_tritons_order_and_words() -> None:
    config = _config(
        ("PERFORMANCE_HINT", "Throughput"),
        ("NUM_STREAMS", "auto"),
        ("INFERENCE_NUM_THREADS", "2"),
        ("HINT_BF16", "yes"),
        ("UNRELATED", "x"),
    )
    assert device_properties(config) == [
        ("INFERENCE_NUM_THREADS", 2),
        ("INFERENCE_PRECISION_HINT", "bf16"),
        ("NUM_STREAMS", "AUTO"),
        ("PERFORMANCE_HINT", "THROUGHPUT"),
    ]
    assert device_properties(_config(("NUM_STREAMS", "3"))) == [("NUM_STREAMS", 3)]


@pytest.mark.parametrize(
    ("key", "value", "text"),
    [
        ("NUM_STREAMS", "Many", "to be either AUTO/NUMA/<int_value>, got many"),
        ("PERFORMANCE_HINT", "fast", "to be LATENCY/THROUGHPUT/CUMULATIVE_THROUGHPUT, got fast"),
        ("HINT_BF16", "no", "to be YES, got no"),
        ("COMPILATION_NUM_THREADS", "-1", "to be a non-negative number, got -1"),
    ],
)
def test_device_properties_refuse_with_tritons_text(key: str, value: str, text: str) -> None:
    with pytest.raises(InvalidArgument, match=f"expected the parameter '{key}' {text}"):
        device_properties(_config((key, value)))


def test_datatypes_and_names() -> None:
    config = text_format.Parse(
        'name: "m" input { name: "S" data_type: TYPE_STRING dims: [1] }'
        ' input { name: "F" data_type: TYPE_FP64 dims: [1] }'
        ' input { name: "U" data_type: TYPE_UINT64 dims: [1] }',
        mc.ModelConfig(),
    )
    errors = [datatype_error("m", "input", t) for t in config.input]
    assert isinstance(errors[0], Internal)
    assert errors[0].message == "unsupported datatype TYPE_STRING for input 'S' for model 'm'"
    assert errors[1] is not None and "TYPE_FP64" in errors[1].message
    assert errors[2] is None
    with pytest.raises(
        InvalidArgument, match="unexpected inference output 'Z', allowed outputs are: A, B"
    ):
        check_allowed("output", "Z", ["B", "A"])


def test_compare_dims_as_triton() -> None:
    static = [(1, 1), (4, 4)]
    compare_dims("m", "x", static, [4], 8, exact=False)  # the batch is not compared for inputs
    with pytest.raises(InvalidArgument) as caught:
        compare_dims("m", "x", static, [4], 8, exact=True)
    assert caught.value.message == (
        "model 'm', tensor 'x': the model expects 2 dimensions (shape [1,4]) but the model "
        "configuration specifies 2 dimensions (an initial batch dimension because "
        "max_batch_size > 0 followed by the explicit tensor shape, making complete shape "
        "[8,4])"
    )
    compare_dims("m", "x", [(0, -1), (4, 4)], [-1], 2, exact=False)  # -1 skips the check
    compare_dims("m", "x", [(1, 10)], [5], 0, exact=True)  # a bounded dynamic dimension
    with pytest.raises(InvalidArgument, match=r"shape \[-1\]\) but .* 1 dimensions \(shape \[10\]"):
        compare_dims("m", "x", [(1, 10)], [10], 0, exact=True)  # strictly inside, as Triton
    with pytest.raises(InvalidArgument, match="should have at least 1 dimension"):
        compare_dims("m", "x", [], [], 4, exact=False)


def test_reshape_and_batch_texts() -> None:
    assert reshaped([(1, 1), (3, 3), (224, 224)], [3, -1], 4) == [1, 3, -1]
    with pytest.raises(Internal, match="other than `-1` or positive integers"):
        reshaped([(4, 4)], [0], 0)
    assert "got '3'... this error can be avoided by setting 'ENABLE_BATCH_PADDING'" in (
        batch_error(8, 3).message
    )


def test_missing_openvino_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "openvino", None)  # import openvino -> ImportError
    monkeypatch.delitem(sys.modules, "service.backends.openvino.backend", raising=False)
    with pytest.raises(BackendUnavailable, match=r"install the 'openvino' extra \(pip install"):
        get_backend("openvino")
