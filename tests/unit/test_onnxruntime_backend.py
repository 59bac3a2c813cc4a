"""OnnxRuntimeBackend.open / OnnxRuntimeInstance on small models built by tests/models.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import models
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from inference import model_config_pb2 as mc
from service.backends.base import InstanceSpec
from service.backends.onnxruntime import OnnxRuntimeBackend
from service.errors import Internal, InvalidArgument
from service.types import TensorSpec

SPEC = InstanceSpec(name="m_0_0", kind="KIND_CPU", device_id=0, threads=2)


def make_config(name: str = "m", **parameters: str) -> mc.ModelConfig:
    config = mc.ModelConfig(
        name=name,
        platform="onnxruntime_onnx",
        backend="onnxruntime",
        default_model_filename="model.onnx",
    )
    for key, value in parameters.items():
        config.parameters[key].string_value = value
    return config


def open_model(
    tmp_path: Path,
    model: onnx.ModelProto | bytes,
    config: mc.ModelConfig | None = None,
    spec: InstanceSpec = SPEC,
) -> Any:
    config = config or make_config()
    models.write_model(tmp_path, config.name, model, None)
    return OnnxRuntimeBackend().open(config, tmp_path / config.name / "1", spec)


def bf16_cast_model() -> onnx.ModelProto:
    """XF = float(X: BF16), FB = bfloat16(F: FP32): BF16 in and out next to FP32 tensors."""
    graph = helper.make_graph(
        [
            helper.make_node("Cast", ["X"], ["XF"], to=TensorProto.FLOAT),
            helper.make_node("Cast", ["F"], ["FB"], to=TensorProto.BFLOAT16),
        ],
        "bf16_cast",
        [
            helper.make_tensor_value_info("X", TensorProto.BFLOAT16, ["n"]),
            helper.make_tensor_value_info("F", TensorProto.FLOAT, ["n"]),
        ],
        [
            helper.make_tensor_value_info("XF", TensorProto.FLOAT, ["n"]),
            helper.make_tensor_value_info("FB", TensorProto.BFLOAT16, ["n"]),
        ],
    )
    return models.make_model(graph)


# --------------------------------------------------------------------------- signature


def test_signature_names_datatypes_and_dynamic_dims(tmp_path: Path) -> None:
    instance = open_model(tmp_path, models.add_sub_model("FP32", ["batch", None, 3]))
    try:
        signature = instance.signature()
        assert list(signature.inputs) == [
            TensorSpec("INPUT0", "FP32", (-1, -1, 3)),
            TensorSpec("INPUT1", "FP32", (-1, -1, 3)),
        ]
        assert list(signature.outputs) == [
            TensorSpec("OUTPUT0", "FP32", (-1, -1, 3)),
            TensorSpec("OUTPUT1", "FP32", (-1, -1, 3)),
        ]
        assert signature.batchable
        assert instance.spec == SPEC
        assert instance.providers == ["CPUExecutionProvider"]
    finally:
        instance.close()


@pytest.mark.parametrize(
    "datatype", ["BOOL", "UINT8", "INT8", "INT32", "INT64", "FP16", "FP64", "BF16", "BYTES"]
)
def test_signature_datatypes(tmp_path: Path, datatype: str) -> None:
    instance = open_model(
        tmp_path,
        models.identity_model(datatype, [2, "n"], input_name="IN", output_name="OUT"),
    )
    try:
        signature = instance.signature()
        assert list(signature.inputs) == [TensorSpec("IN", datatype, (2, -1))]
        assert list(signature.outputs) == [TensorSpec("OUT", datatype, (2, -1))]
        assert not signature.batchable
    finally:
        instance.close()


# --------------------------------------------------------------------------- execute


def test_execute_fp32_add_sub(tmp_path: Path) -> None:
    instance = open_model(tmp_path, models.add_sub_model("FP32", ["batch", 4]))
    try:
        a = np.arange(8, dtype=np.float32).reshape(2, 4)
        b = np.full((2, 4), 0.5, dtype=np.float32)
        out = instance.execute({"INPUT0": a, "INPUT1": b}, ["OUTPUT1", "OUTPUT0"])
        assert list(out) == ["OUTPUT1", "OUTPUT0"]
        np.testing.assert_array_equal(out["OUTPUT0"], a + b)
        np.testing.assert_array_equal(out["OUTPUT1"], a - b)
        assert out["OUTPUT0"].dtype == np.float32
        only = instance.execute({"INPUT0": a, "INPUT1": b}, ["OUTPUT0"])
        assert list(only) == ["OUTPUT0"]
    finally:
        instance.close()


def test_execute_accepts_read_only_views(tmp_path: Path) -> None:
    # what validation hands over: np.frombuffer views of the request's bytes
    instance = open_model(tmp_path, models.identity_model("FP32", ["batch", 3]))
    try:
        raw = np.array([[1, 2, 3], [4, 5, 6]], np.float32).tobytes()
        view = np.frombuffer(raw, dtype=np.float32).reshape(2, 3)
        assert not view.flags.writeable
        out = instance.execute({"INPUT0": view}, ["OUTPUT0"])
        np.testing.assert_array_equal(out["OUTPUT0"], [[1, 2, 3], [4, 5, 6]])
    finally:
        instance.close()


def test_execute_fp16(tmp_path: Path) -> None:
    instance = open_model(tmp_path, models.add_sub_model("FP16", ["batch", 3]))
    try:
        a = np.array([[1.5, -2.0, 65504.0]], dtype=np.float16)
        b = np.array([[0.25, 1.0, 0.0]], dtype=np.float16)
        out = instance.execute({"INPUT0": a, "INPUT1": b}, ["OUTPUT0", "OUTPUT1"])
        assert out["OUTPUT0"].dtype == np.float16
        np.testing.assert_array_equal(out["OUTPUT0"], a + b)
        np.testing.assert_array_equal(out["OUTPUT1"], a - b)
    finally:
        instance.close()


def test_execute_bf16_identity_keeps_bit_patterns(tmp_path: Path) -> None:
    instance = open_model(tmp_path, models.identity_model("BF16", ["batch", 4]))
    try:
        # 1.0, -2.0, NaN, smallest subnormal; then 0, -0, +inf, 3.140625
        bits = np.array([[0x3F80, 0xC000, 0x7FC0, 0x0001], [0, 0x8000, 0x7F80, 0x4049]], np.uint16)
        out = instance.execute({"INPUT0": bits}, ["OUTPUT0"])
        assert out["OUTPUT0"].dtype == np.uint16
        assert out["OUTPUT0"].shape == (2, 4)
        np.testing.assert_array_equal(out["OUTPUT0"], bits)
    finally:
        instance.close()


def test_execute_bf16_values_are_interpreted_as_bfloat16(tmp_path: Path) -> None:
    instance = open_model(tmp_path, bf16_cast_model())
    try:
        bits = np.array([0x3F80, 0xC000, 0x4049, 0x0000], np.uint16)
        floats = np.array([1.0, -2.0, 0.5, 3.140625], np.float32)
        out = instance.execute({"X": bits, "F": floats}, ["XF", "FB"])
        assert out["XF"].dtype == np.float32
        np.testing.assert_array_equal(out["XF"], [1.0, -2.0, 3.140625, 0.0])
        assert out["FB"].dtype == np.uint16
        np.testing.assert_array_equal(out["FB"], [0x3F80, 0xC000, 0x3F00, 0x4049])
        # outputs own their memory: a later run does not change an earlier result
        first = out["FB"]
        instance.execute({"X": bits, "F": np.zeros(4, np.float32)}, ["FB"])
        np.testing.assert_array_equal(first, [0x3F80, 0xC000, 0x3F00, 0x4049])
    finally:
        instance.close()


def test_execute_bytes_in_str_out(tmp_path: Path) -> None:
    instance = open_model(tmp_path, models.identity_model("BYTES", [None]))
    try:
        items = np.empty(3, dtype=np.object_)
        items[:] = [b"hello", "héllo wörld".encode(), b""]
        out = instance.execute({"INPUT0": items}, ["OUTPUT0"])
        assert out["OUTPUT0"].tolist() == ["hello", "héllo wörld", ""]
        assert all(isinstance(v, str) for v in out["OUTPUT0"].flat)
    finally:
        instance.close()


def test_execute_bytes_multidimensional(tmp_path: Path) -> None:
    instance = open_model(tmp_path, models.identity_model("BYTES", ["batch", 2]))
    try:
        items = np.empty((2, 2), dtype=np.object_)
        items[:] = [[b"a", b"b"], [b"c", b"d"]]
        out = instance.execute({"INPUT0": items}, ["OUTPUT0"])
        assert out["OUTPUT0"].shape == (2, 2)
        assert out["OUTPUT0"].tolist() == [["a", "b"], ["c", "d"]]
    finally:
        instance.close()


def test_execute_non_utf8_bytes_is_invalid_argument(tmp_path: Path) -> None:
    config = make_config("strings")
    instance = open_model(
        tmp_path, models.identity_model("BYTES", [None], input_name="TEXT"), config
    )
    try:
        items = np.empty(2, dtype=np.object_)
        items[:] = [b"fine", b"\xff\xfe"]
        with pytest.raises(InvalidArgument) as info:
            instance.execute({"TEXT": items}, ["OUTPUT0"])
        assert info.value.message == (
            "input 'TEXT' for model 'strings' holds bytes that are not valid UTF-8, "
            "which onnxruntime string tensors require"
        )
    finally:
        instance.close()


def test_execute_runtime_failure_is_internal(tmp_path: Path) -> None:
    instance = open_model(tmp_path, models.identity_model("FP32", ["batch", 4]))
    try:
        with pytest.raises(Internal) as info:
            instance.execute({"INPUT0": np.zeros((1, 5), np.float32)}, ["OUTPUT0"])
        assert info.value.message.startswith("onnx runtime error: ")
    finally:
        instance.close()


# --------------------------------------------------------------------------- open failures


def test_open_missing_file(tmp_path: Path) -> None:
    (tmp_path / "m" / "1").mkdir(parents=True)
    with pytest.raises(ValueError) as info:
        OnnxRuntimeBackend().open(make_config(), tmp_path / "m" / "1", SPEC)
    assert str(info.value) == "model file 'model.onnx' not found in version 1"


def test_open_uses_default_model_filename(tmp_path: Path) -> None:
    config = make_config()
    config.default_model_filename = "net.onnx"
    models.write_model(
        tmp_path, "m", models.identity_model("FP32", [2]), None, version=3, filename="net.onnx"
    )
    instance = OnnxRuntimeBackend().open(config, tmp_path / "m" / "3", SPEC)
    instance.close()
    with pytest.raises(ValueError, match=r"^model file 'model\.onnx' not found in version 3$"):
        OnnxRuntimeBackend().open(make_config(), tmp_path / "m" / "3", SPEC)


@pytest.mark.parametrize("data", [b"this is not an onnx model", b""], ids=["garbage", "empty"])
def test_open_corrupt_file(tmp_path: Path, data: bytes) -> None:
    with pytest.raises(ValueError) as info:
        open_model(tmp_path, data)
    message = str(info.value)
    prefix = "onnxruntime failed to load 'model.onnx': "
    assert message.startswith(prefix)
    assert len(message) > len(prefix) + 5  # carries onnxruntime's reason


# --------------------------------------------------------------------------- session options


class CapturingSession:
    """Wraps onnxruntime.InferenceSession to record the options the backend passes."""

    calls: ClassVar[list[dict[str, Any]]] = []

    def __new__(cls, path: str, sess_options: Any = None, providers: Any = None) -> Any:
        cls.calls.append({"options": sess_options, "providers": providers})
        return REAL_SESSION(path, sess_options=sess_options, providers=providers)


REAL_SESSION = ort.InferenceSession


@pytest.fixture
def captured(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    CapturingSession.calls = []
    # the backend looks the class up on the onnxruntime module at each open()
    monkeypatch.setattr(ort, "InferenceSession", CapturingSession)
    return CapturingSession.calls


def test_thread_counts_default_to_spec_budget(
    tmp_path: Path, captured: list[dict[str, Any]]
) -> None:
    open_model(tmp_path, models.identity_model("FP32", [2])).close()
    (call,) = captured
    assert call["options"].intra_op_num_threads == SPEC.threads
    assert call["providers"] == [("CPUExecutionProvider", {})]


def test_thread_count_parameters_parsed(tmp_path: Path, captured: list[dict[str, Any]]) -> None:
    config = make_config(intra_op_thread_count="3", inter_op_thread_count="2")
    instance = open_model(tmp_path, models.identity_model("FP32", [2]), config)
    out = instance.execute({"INPUT0": np.array([1, 2], np.float32)}, ["OUTPUT0"])
    instance.close()
    np.testing.assert_array_equal(out["OUTPUT0"], [1, 2])
    (call,) = captured
    assert call["options"].intra_op_num_threads == 3
    assert call["options"].inter_op_num_threads == 2


@pytest.mark.parametrize(("given", "spin"), [(None, "0"), ("true", "1"), ("false", "0")])
def test_allow_spinning_read_without_touching_the_config(
    tmp_path: Path, captured: list[dict[str, Any]], given: str | None, spin: str
) -> None:
    """The config the instance opens with is the one clients are shown: reading a
    parameter must not add it (a protobuf map's [] does)."""
    config = make_config(**({} if given is None else {"allow_spinning": given}))
    before = config.SerializeToString(deterministic=True)
    open_model(tmp_path, models.identity_model("FP32", [2]), config).close()
    assert config.SerializeToString(deterministic=True) == before
    (call,) = captured
    options = call["options"]
    assert options.get_session_config_entry("session.intra_op.allow_spinning") == spin
    assert options.get_session_config_entry("session.inter_op.allow_spinning") == spin


@pytest.mark.parametrize("key", ["intra_op_thread_count", "inter_op_thread_count"])
def test_bad_thread_count_parameter(tmp_path: Path, key: str) -> None:
    config = make_config(**{key: "many"})
    with pytest.raises(ValueError) as info:
        open_model(tmp_path, models.identity_model("FP32", [2]), config)
    # (the backend currently prefixes this config error with "onnxruntime failed to load ...")
    assert f"parameter '{key}' must be an integer, got 'many'" in str(info.value)


def test_gpu_kind_without_cuda_is_refused(tmp_path: Path) -> None:
    """No silent CPU run for a GPU instance (allow_cpu_fallback: test_gpu_placement)."""
    if "CUDAExecutionProvider" in ort.get_available_providers():
        pytest.skip("this onnxruntime build has CUDA")
    spec = InstanceSpec(name="m_0_0", kind="KIND_GPU", device_id=0, threads=1)
    with pytest.raises(ValueError, match="needs CUDAExecutionProvider not available"):
        open_model(tmp_path, models.identity_model("FP32", [2]), spec=spec)


# --------------------------------------------------------------------------- scalars


def scalar_rank_model() -> onnx.ModelProto:
    """RANK = the rank of X as the model got it; X and RANK declared as scalars."""
    graph = helper.make_graph(
        [
            helper.make_node("Shape", ["X"], ["S"]),
            helper.make_node("Size", ["S"], ["RANK"]),
            helper.make_node("Identity", ["X"], ["Y"]),
        ],
        "scalar_rank",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, None)],
        [
            helper.make_tensor_value_info("RANK", TensorProto.INT64, None),
            helper.make_tensor_value_info("Y", TensorProto.FLOAT, None),
        ],
    )
    opsets = [helper.make_opsetid("", models.DEFAULT_OPSET)]
    version = helper.find_min_ir_version_for(opsets)
    return helper.make_model(graph, opset_imports=opsets, ir_version=version)


@pytest.mark.parametrize(
    ("max_batch_size", "dims", "shape"),
    [(0, [1], (1,)), (0, [1, 1], (1, 1)), (4, [1], (1, 1))],
)
def test_scalars_are_fed_rank_0_and_come_back_in_the_configs_shape(
    tmp_path: Path, max_batch_size: int, dims: list[int], shape: tuple[int, ...]
) -> None:
    """Triton's ONNX Runtime backend: one value fed as a rank-0 tensor; a rank-0 result
    takes its output's config dims (with the request's batch row when batching)."""
    config = make_config()
    config.max_batch_size = max_batch_size
    config.input.add(name="X", data_type=mc.TYPE_FP32, dims=dims)
    config.output.add(name="RANK", data_type=mc.TYPE_INT64, dims=dims)
    config.output.add(name="Y", data_type=mc.TYPE_FP32, dims=dims)
    instance = open_model(tmp_path, scalar_rank_model(), config)
    assert [s.shape for s in instance.signature().inputs] == [()]
    out = instance.execute({"X": np.full(shape, 1.5, np.float32)}, ["RANK", "Y"])
    assert (out["RANK"].shape, out["RANK"].tolist()) == (shape, np.zeros(shape).tolist())
    assert (out["Y"].shape, out["Y"].tolist()) == (shape, np.full(shape, 1.5).tolist())
    instance.close()
