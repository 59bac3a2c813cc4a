"""DLPack for ``pb_utils.Tensor`` (``from_dlpack`` / ``to_dlpack``), as Triton's python
backend has it (src/pb_tensor.cc: the same rules and error texts).

Host tensors (DLPack device CPU or CUDA-host) become numpy arrays through numpy's own
DLPack import: no copy, the producer's memory is shared. GPU tensors (device CUDA) are
kept as a tensor of whichever maintained binding is installed in the model's
environment, ``torch`` first, then ``cupy`` (imported only when a GPU tensor appears),
and are copied to the host once, when the worker sends them back to the server. A raw
capsule's device is read from its ``DLManagedTensor`` with ctypes (DLPack's stable ABI).
"""

from __future__ import annotations

import ctypes
import importlib
from typing import Any

import numpy as np

from wire.datatypes import Array

__all__ = [
    "CPU",
    "CUDA",
    "CUDA_HOST",
    "DLPackError",
    "DeviceTensor",
    "capsule_device",
    "import_dlpack",
]


CPU, CUDA, CUDA_HOST = 1, 2, 3  # DLDeviceType values
UINT, BFLOAT = 1, 4  # DLDataTypeCode values

try:  # numpy has no bfloat16; ml_dtypes gives it one (what as_numpy() returns for BF16)
    import ml_dtypes

    BFLOAT16: np.dtype[Any] | None = np.dtype(ml_dtypes.bfloat16)
except ImportError:  # pragma: no cover - ml_dtypes is a dependency
    BFLOAT16 = None


class DLPackError(Exception):
    """Raised with Triton's message; pb_core turns it into TritonModelException."""


class _Device(ctypes.Structure):
    _fields_ = (("device_type", ctypes.c_int), ("device_id", ctypes.c_int))


class _DataType(ctypes.Structure):
    _fields_ = (("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16))


class _Tensor(ctypes.Structure):
    _fields_ = (
        ("data", ctypes.c_void_p),
        ("device", _Device),
        ("ndim", ctypes.c_int),
        ("dtype", _DataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    )


_get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_get_pointer.restype = ctypes.c_void_p
_get_pointer.argtypes = (ctypes.py_object, ctypes.c_char_p)
_is_valid = ctypes.pythonapi.PyCapsule_IsValid
_is_valid.restype = ctypes.c_int
_is_valid.argtypes = (ctypes.py_object, ctypes.c_char_p)


def _is_capsule(obj: object) -> bool:
    return type(obj).__name__ == "PyCapsule"


def _dl_tensor(capsule: object) -> _Tensor:
    """The DLTensor an unconsumed legacy ``dltensor`` capsule points at (DLManagedTensor
    starts with it)."""
    if not _is_valid(capsule, b"dltensor"):
        raise DLPackError("the DLPack capsule was already consumed or is not a 'dltensor'")
    return _Tensor.from_address(_get_pointer(capsule, b"dltensor"))


def bfloat16_capsule(bits: Array) -> object:
    """A capsule of BF16 elements over ``bits`` (uint16 patterns): numpy exports them as
    unsigned integers, then the element type is marked bfloat16, as Triton's own BF16
    tensors arrive in torch (``torch.from_dlpack`` gives torch.bfloat16)."""
    capsule = bits.view(np.uint16).__dlpack__()
    _dl_tensor(capsule).dtype.code = BFLOAT
    return capsule


def capsule_device(capsule: object) -> tuple[int, int]:
    """(device type, device id) of an unconsumed legacy ``dltensor`` capsule."""
    tensor = _dl_tensor(capsule)
    return int(tensor.device.device_type), int(tensor.device.device_id)


class _Capsule:
    """Gives a bare capsule the ``__dlpack__`` protocol, so numpy and torch can import it."""

    def __init__(self, capsule: object, device: tuple[int, int]) -> None:
        self._capsule = capsule
        self._device = device

    def __dlpack__(self, stream: Any = None, **kwargs: Any) -> object:
        return self._capsule

    def __dlpack_device__(self) -> tuple[int, int]:
        return self._device


class DeviceTensor:
    """A GPU tensor held through torch or cupy."""

    def __init__(self, tensor: Any, library: str, device_id: int) -> None:
        self.tensor = tensor
        self.library = library
        self.device_id = device_id

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(int(d) for d in self.tensor.shape)

    @property
    def dtype(self) -> np.dtype[Any]:
        """The numpy dtype of the elements (torch dtypes are mapped by name)."""
        if self.library == "cupy":
            dtype: np.dtype[Any] = np.dtype(self.tensor.dtype)
            return dtype
        name = str(self.tensor.dtype).removeprefix("torch.")
        if name == "bfloat16" and BFLOAT16 is not None:
            return BFLOAT16
        return np.dtype({"bool": "bool", "bfloat16": "uint16"}.get(name, name))

    def to_host(self) -> Array:
        """One device→host copy (synchronous)."""
        if self.library == "cupy":
            host: Array = self.tensor.get()
            return host
        tensor = self.tensor.detach()
        if str(tensor.dtype) == "torch.bfloat16":  # numpy has no bfloat16: raw 16-bit patterns
            bits: Array = tensor.view(importlib.import_module("torch").int16).cpu().numpy()
            return bits.view(np.uint16)
        out: Array = tensor.cpu().numpy()
        return out

    def dlpack(self, stream: Any = None) -> object:
        return self.tensor.__dlpack__(stream=stream)


def _gpu_import(source: Any, device_id: int) -> DeviceTensor:
    errors = []
    for library in ("torch", "cupy"):
        try:
            module = importlib.import_module(library)
        except ImportError as exc:
            errors.append(f"{library}: {exc}")
            continue
        return DeviceTensor(module.from_dlpack(source), library, device_id)
    raise DLPackError(
        "DLPack capsule passed pointer to memory allocated on GPU device, when GPU is not "
        "available (GPU tensors need torch or cupy in the model's environment: "
        + "; ".join(errors)
        + ")"
    )


def import_dlpack(obj: object) -> Array | DeviceTensor:
    """A capsule or an object with ``__dlpack__``/``__dlpack_device__``, as numpy (host) or
    a ``DeviceTensor`` (GPU). Raises DLPackError with Triton's messages."""
    if _is_capsule(obj):
        device = capsule_device(obj)
        source: Any = _Capsule(obj, device)
    elif hasattr(obj, "__dlpack__") and hasattr(obj, "__dlpack_device__"):
        device_type, device_id = obj.__dlpack_device__()
        device = (int(device_type), int(device_id))
        source = obj
    else:
        raise DLPackError(
            "Provided tensor is not supported. Tensor must be a DLPack capsule or have "
            "`__dlpack__` and `__dlpack_device__` attributes"
        )
    if device[0] == CUDA:
        return _gpu_import(source, device[1])
    if device[0] not in (CPU, CUDA_HOST):
        raise DLPackError(f"DLDevice type {device[0]} is not support by Python backend.")
    bfloat16 = False
    if BFLOAT16 is not None:  # numpy refuses bfloat16 capsules: take them as uint16 bits
        capsule = source.__dlpack__()
        tensor = _dl_tensor(capsule)
        if tensor.dtype.code == BFLOAT and tensor.dtype.bits == 16:
            tensor.dtype.code = UINT
            bfloat16 = True
        source = _Capsule(capsule, device)
    try:
        array: Array = np.from_dlpack(source)
    except (BufferError, TypeError, RuntimeError) as exc:
        raise DLPackError(f"DLPack tensor could not be imported: {exc}") from exc
    if not array.flags.c_contiguous:
        raise DLPackError(
            "DLPack tensor is not contiguous. Only contiguous DLPack tensors that are stored "
            "in C-Order are supported."
        )
    return array.view(BFLOAT16) if bfloat16 and BFLOAT16 is not None else array
