"""pb_utils.Tensor DLPack surface (from_dlpack / to_dlpack / is_cpu / __dlpack__), with
Triton's rules and texts; GPU tensors through a stand-in torch module (the real GPU run is
in tests/unit/test_gpu.py), and a model that uses DLPack served by a real worker."""

from __future__ import annotations

import ctypes
import sys
import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from python_models.harness import open_one, request, run, write_model

from service.backends.python import dlpack
from service.backends.python import triton_python_backend_utils as pb_utils
from service.backends.python.settings import Settings


def test_from_dlpack_of_a_numpy_array_shares_its_memory() -> None:
    array = np.arange(6, dtype=np.float32).reshape(2, 3)
    tensor = pb_utils.Tensor.from_dlpack("X", array)
    assert tensor.is_cpu() and tensor.name() == "X" and tensor.shape() == [2, 3]
    assert tensor.triton_dtype() == 11
    assert np.shares_memory(tensor.as_numpy(), array)
    np.testing.assert_array_equal(tensor.as_numpy(), array)


def test_to_dlpack_round_trip_without_a_copy() -> None:
    source = pb_utils.Tensor("A", np.arange(4, dtype=np.int64))
    capsule = source.to_dlpack()
    assert type(capsule).__name__ == "PyCapsule"
    again = pb_utils.Tensor.from_dlpack("B", capsule)
    assert np.shares_memory(again.as_numpy(), source.as_numpy())
    # a pb tensor is itself a DLPack producer, as Triton's is
    assert source.__dlpack_device__() == (dlpack.CPU, 0)
    viewed = np.from_dlpack(source)
    assert np.shares_memory(viewed, source.as_numpy())
    with pytest.raises(pb_utils.TritonModelException, match="consumed"):
        pb_utils.Tensor.from_dlpack("C", capsule)  # a capsule is used once


@pytest.mark.parametrize("dtype", [np.bool_, np.uint8, np.int16, np.float16, np.float64])
def test_dtypes_cross_dlpack(dtype: Any) -> None:
    array = np.ones((3,), dtype=dtype)
    tensor = pb_utils.Tensor.from_dlpack("X", pb_utils.Tensor("X", array).to_dlpack())
    assert tensor.as_numpy().dtype == np.dtype(dtype)


def test_read_only_arrays_are_exported_as_copies() -> None:
    array = np.arange(3, dtype=np.float32)
    array.flags.writeable = False
    out = pb_utils.Tensor.from_dlpack("X", pb_utils.Tensor("X", array).to_dlpack())
    np.testing.assert_array_equal(out.as_numpy(), array)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda: pb_utils.Tensor("S", np.array([b"a"], dtype=np.object_)).to_dlpack(),
            "DLPack does not have support for string tensors.",
        ),
        (
            lambda: pb_utils.Tensor.from_dlpack("", np.zeros(1)),
            "Tensor name cannot be an empty string.",
        ),
        (
            lambda: pb_utils.Tensor.from_dlpack("X", [1, 2, 3]),
            "Provided tensor is not supported. Tensor must be a DLPack capsule or have "
            "`__dlpack__` and `__dlpack_device__` attributes",
        ),
        (
            lambda: pb_utils.Tensor.from_dlpack("X", np.zeros((3, 4), np.float32).T),
            "DLPack tensor is not contiguous. Only contiguous DLPack tensors that are stored "
            "in C-Order are supported.",
        ),
    ],
)
def test_misuse_gets_tritons_message(call: Any, message: str) -> None:
    with pytest.raises(pb_utils.TritonModelException) as info:
        call()
    assert info.value.message() == message


# --------------------------------------------------------------- capsules that claim a device


class _Device(ctypes.Structure):
    _fields_ = (("device_type", ctypes.c_int), ("device_id", ctypes.c_int))


class _ManagedTensor(ctypes.Structure):
    _fields_ = (
        ("data", ctypes.c_void_p),
        ("device", _Device),
        ("ndim", ctypes.c_int),
        ("dtype", ctypes.c_uint32),
        ("shape", ctypes.c_void_p),
        ("strides", ctypes.c_void_p),
        ("byte_offset", ctypes.c_uint64),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
    )


_new_capsule = ctypes.pythonapi.PyCapsule_New
_new_capsule.restype = ctypes.py_object
_new_capsule.argtypes = (ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p)
_KEEP: list[Any] = []


def _capsule_on(device_type: int, device_id: int) -> Any:
    """A 'dltensor' capsule whose DLTensor says it lives on the given device."""
    managed = _ManagedTensor(device=_Device(device_type, device_id))
    _KEEP.append(managed)
    return _new_capsule(ctypes.addressof(managed), b"dltensor", None)


def test_capsule_device_is_read_from_the_capsule() -> None:
    assert dlpack.capsule_device(_capsule_on(2, 3)) == (2, 3)
    assert dlpack.capsule_device(np.zeros(2).__dlpack__()) == (1, 0)


def test_unsupported_device_type_is_refused() -> None:
    with pytest.raises(pb_utils.TritonModelException) as info:
        pb_utils.Tensor.from_dlpack("X", _capsule_on(7, 0))
    assert info.value.message() == "DLDevice type 7 is not support by Python backend."


class _FakeCudaTensor:
    """What torch.from_dlpack returns for a CUDA capsule, reduced to what is used."""

    def __init__(self, host: np.ndarray) -> None:
        self.host = host
        self.shape = host.shape
        self.dtype = f"torch.{host.dtype.name}"
        self.copies = 0

    def detach(self) -> _FakeCudaTensor:
        return self

    def cpu(self) -> _FakeCudaTensor:
        self.copies += 1
        return self

    def numpy(self) -> np.ndarray:
        return self.host.copy()

    def __dlpack__(self, stream: Any = None) -> str:
        return f"capsule-from-torch(stream={stream})"


def test_gpu_tensor_through_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    host = np.arange(6, dtype=np.float32).reshape(3, 2)
    fake = _FakeCudaTensor(host)
    torch = types.ModuleType("torch")
    seen: list[Any] = []
    torch.from_dlpack = lambda source: seen.append(source) or fake  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "torch", torch)
    tensor = pb_utils.Tensor.from_dlpack("G", _capsule_on(2, 1))
    assert not tensor.is_cpu()
    assert tensor.shape() == [3, 2] and tensor.triton_dtype() == 11
    assert tensor.__dlpack_device__() == (dlpack.CUDA, 1)
    assert seen[0].__dlpack_device__() == (2, 1)  # torch got the capsule with its device
    with pytest.raises(pb_utils.TritonModelException) as info:
        tensor.as_numpy()
    assert info.value.message() == "Tensor is stored in GPU and cannot be converted to NumPy."
    assert tensor.to_dlpack() == "capsule-from-torch(stream=None)"
    np.testing.assert_array_equal(tensor.host_array(), host)  # what the worker sends back
    assert fake.copies == 1


def test_gpu_tensor_without_a_gpu_library(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("torch", "cupy"):
        monkeypatch.setitem(sys.modules, name, None)  # import fails
    with pytest.raises(pb_utils.TritonModelException) as info:
        pb_utils.Tensor.from_dlpack("G", _capsule_on(2, 0))
    assert info.value.message().startswith(
        "DLPack capsule passed pointer to memory allocated on GPU device, when GPU is not available"
    )


# ------------------------------------------------------------ FORCE_CPU_ONLY_INPUT_TENSORS


def test_force_cpu_only_input_tensors_values(tmp_path: Path) -> None:
    config = write_model(tmp_path, "m", "")
    assert Settings.from_config(config).force_cpu_only_inputs
    config.parameters["FORCE_CPU_ONLY_INPUT_TENSORS"].string_value = "no"
    assert not Settings.from_config(config).force_cpu_only_inputs
    config.parameters["FORCE_CPU_ONLY_INPUT_TENSORS"].string_value = "maybe"
    with pytest.raises(ValueError) as info:
        Settings.from_config(config)
    assert str(info.value) == "Incorrect value for FORCE_CPU_ONLY_INPUT_TENSORS: maybe'"


_DLPACK_MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X")
            assert x.is_cpu()
            shared = np.from_dlpack(x)  # torch.from_dlpack(x) on a GPU machine
            doubled = pb_utils.Tensor.from_dlpack("Y", (shared * 2).__dlpack__())
            responses.append(pb_utils.InferenceResponse([doubled]))
        return responses
"""

_DLPACK_CONFIG = """
max_batch_size: 8
input [{ name: "X" data_type: TYPE_FP32 dims: [ -1 ] }]
output [{ name: "Y" data_type: TYPE_FP32 dims: [ -1 ] }]
parameters { key: "FORCE_CPU_ONLY_INPUT_TENSORS" value { string_value: "no" } }
"""


def test_a_model_using_dlpack_runs_in_a_worker(tmp_path: Path) -> None:
    config = write_model(tmp_path, "dl", _DLPACK_MODEL, _DLPACK_CONFIG)
    instance = open_one(config, tmp_path / "dl" / "1")
    try:
        small = np.arange(8, dtype=np.float32).reshape(2, 4)
        large = np.full((2, 20_000), 3, dtype=np.float32)  # through shared memory
        first, second = run(instance, request(X=small), request(X=large))
        assert first.only.error is None, first.only.error
        np.testing.assert_array_equal(first.only.outputs["Y"], small * 2)
        np.testing.assert_array_equal(second.only.outputs["Y"], large * 2)
    finally:
        instance.close()


# --------------------------------------------------------------------------- BF16


def test_bf16_tensor_is_bfloat16_in_numpy_and_bfloat16_in_dlpack() -> None:
    """BF16 is ml_dtypes.bfloat16 for as_numpy; its DLPack capsule says bfloat16 (code
    4), as Triton's do for torch; it travels as uint16 patterns; and a bfloat16 capsule
    comes back in as BF16."""
    import ml_dtypes

    from service.backends.python import dlpack as dl
    from service.backends.python.pb_core import BF16, Tensor

    values = np.array([1.0, -2.5, 0.15625, 65536.0], dtype=ml_dtypes.bfloat16)
    tensor = Tensor("X", values)
    assert tensor.triton_dtype() == BF16 and tensor.as_numpy().dtype == values.dtype
    assert tensor.host_array().dtype == np.uint16
    np.testing.assert_array_equal(tensor.host_array(), values.view(np.uint16))
    from_bits = Tensor("X", values.view(np.uint16), BF16)  # how the worker gets an input
    np.testing.assert_array_equal(from_bits.as_numpy(), values)
    capsule = tensor.to_dlpack()
    assert dl._dl_tensor(capsule).dtype.code == dl.BFLOAT
    back = Tensor.from_dlpack("Y", capsule)
    assert back.triton_dtype() == BF16
    np.testing.assert_array_equal(back.as_numpy(), values)
