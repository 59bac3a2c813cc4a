"""Tensors, datatypes and errors of ``triton_python_backend_utils`` (re-exported there)."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from wire.datatypes import Array, serialize_bytes_tensor, split_bytes

from . import dlpack
from .dlpack import DeviceTensor

__all__ = [
    "TRITON_STRING_TO_NUMPY",
    "Tensor",
    "TritonError",
    "TritonModelException",
    "deserialize_bytes_tensor",
    "numpy_to_triton_type",
    "serialize_byte_tensor",
    "triton_string_to_numpy",
    "triton_to_numpy_type",
]

# TRITONSERVER_DataType codes, as Tensor.triton_dtype() reports them.
_CODE_TO_NUMPY: dict[int, type[Any]] = {
    1: np.bool_,
    2: np.uint8,
    3: np.uint16,
    4: np.uint32,
    5: np.uint64,
    6: np.int8,
    7: np.int16,
    8: np.int32,
    9: np.int64,
    10: np.float16,
    11: np.float32,
    12: np.float64,
    13: np.object_,
}
BF16 = 14  # TRITONSERVER_TYPE_BF16: ml_dtypes.bfloat16 arrays, uint16 patterns on the wire
if dlpack.BFLOAT16 is not None:
    _CODE_TO_NUMPY[BF16] = dlpack.BFLOAT16.type
_NUMPY_TO_CODE = {np.dtype(t): code for code, t in _CODE_TO_NUMPY.items()}

TRITON_STRING_TO_NUMPY: dict[str, type[Any]] = {
    "TYPE_BOOL": bool,
    "TYPE_UINT8": np.uint8,
    "TYPE_UINT16": np.uint16,
    "TYPE_UINT32": np.uint32,
    "TYPE_UINT64": np.uint64,
    "TYPE_INT8": np.int8,
    "TYPE_INT16": np.int16,
    "TYPE_INT32": np.int32,
    "TYPE_INT64": np.int64,
    "TYPE_FP16": np.float16,
    "TYPE_FP32": np.float32,
    "TYPE_FP64": np.float64,
    "TYPE_STRING": np.object_,
}
if dlpack.BFLOAT16 is not None:
    TRITON_STRING_TO_NUMPY["TYPE_BF16"] = dlpack.BFLOAT16.type


def triton_to_numpy_type(data_type: int) -> type[Any] | None:
    return _CODE_TO_NUMPY.get(data_type)


def numpy_to_triton_type(data_type: npt.DTypeLike) -> int | None:
    try:
        dtype = np.dtype(data_type)
    except TypeError:
        return None
    if dtype.type is np.bytes_:
        return 13
    return _NUMPY_TO_CODE.get(dtype)


def triton_string_to_numpy(triton_type_string: str) -> type[Any]:
    return TRITON_STRING_TO_NUMPY[triton_type_string]


def serialize_byte_tensor(input_tensor: Array) -> bytes:
    """Triton's length-prefixed BYTES form; items that are not ``bytes`` go as the UTF-8 of
    their ``str``, as Triton's ``pb_utils`` does (a ``bytearray`` too)."""
    items = input_tensor.ravel(order="C")
    return serialize_bytes_tensor(
        [item if isinstance(item, bytes) else str(item).encode("utf-8") for item in items]
    )


def deserialize_bytes_tensor(encoded_tensor: bytes) -> Array:
    items = split_bytes(encoded_tensor)
    out = np.empty(len(items), dtype=np.object_)
    out[:] = items
    return out


class TritonError:
    """An error carried by an ``InferenceResponse`` (only the message reaches the client)."""

    UNKNOWN = 0
    INTERNAL = 1
    NOT_FOUND = 2
    INVALID_ARG = 3
    UNAVAILABLE = 4
    UNSUPPORTED = 5
    ALREADY_EXISTS = 6
    CANCELLED = 7

    def __init__(self, message: str, code: int = INTERNAL) -> None:
        self._message = message
        self._code = code

    def message(self) -> str:
        return self._message

    def code(self) -> int:
        return self._code

    def __str__(self) -> str:
        return self._message


class TritonModelException(Exception):
    def __init__(self, msg: str) -> None:
        super().__init__(msg)
        self._msg = msg

    def message(self) -> str:
        return self._msg


class Tensor:
    """A named tensor: a numpy array (``as_numpy()`` returns it, no copy), or a GPU tensor
    taken in with ``from_dlpack`` (``is_cpu()`` False; see ``dlpack.py``)."""

    def __init__(self, name: str, numpy_array: Array, triton_dtype: int | None = None) -> None:
        array = numpy_array if type(numpy_array) is np.ndarray else np.asarray(numpy_array)
        kind = array.dtype.kind
        if kind == "U" or kind == "S":
            # Triton refuses these; carrying them as BYTES is what every model meant.
            converted = np.empty(array.shape, dtype=np.object_)
            converted.flat[:] = [
                item.encode("utf-8") if isinstance(item, str) else bytes(item)
                for item in array.flat
            ]
            array = converted
        if triton_dtype is not None:
            target = triton_to_numpy_type(triton_dtype)
            if target is not None and array.dtype != np.dtype(target):
                array = array.view(target)
        self._name = name
        self._array = array
        self._device: DeviceTensor | None = None
        self._dtype = _dtype_code(name, array.dtype)

    @classmethod
    def _received(cls, name: str, array: Array) -> Tensor:
        """An input as the worker unpacked it: a numpy array (BYTES as ``np.object_``),
        so the constructor's conversions apply to none but a ``str_``/``bytes_`` array
        (which takes the constructor); BF16 inputs take it too (``triton_dtype``)."""
        kind = array.dtype.kind
        if kind == "U" or kind == "S":
            return cls(name, array)
        tensor = cls.__new__(cls)
        tensor._name = name
        tensor._array = array
        tensor._device = None
        tensor._dtype = _dtype_code(name, array.dtype)
        return tensor

    def name(self) -> str:
        return self._name

    def as_numpy(self) -> Array:
        if self._device is not None:
            raise TritonModelException("Tensor is stored in GPU and cannot be converted to NumPy.")
        return self._array

    def triton_dtype(self) -> int:
        return self._dtype

    def data_type(self) -> int:
        """Alias of ``triton_dtype``."""
        return self._dtype

    def shape(self) -> list[int]:
        shape = self._device.shape if self._device is not None else self._array.shape
        return [int(d) for d in shape]

    def is_cpu(self) -> bool:
        return self._device is None

    def to_dlpack(self) -> Any:
        """A DLPack capsule sharing this tensor's memory (host or GPU)."""
        if self._device is not None:
            return self._device.dlpack()
        if self._dtype == 13:
            raise TritonModelException("DLPack does not have support for string tensors.")
        array = self._array
        if not array.flags.writeable:
            array = array.copy()  # legacy DLPack cannot mark memory read-only
        if self._dtype == BF16:
            return dlpack.bfloat16_capsule(array)
        return array.__dlpack__()

    def __dlpack__(self, stream: Any = None, **kwargs: Any) -> Any:
        if self._device is not None:
            return self._device.dlpack(stream)
        return self.to_dlpack()

    def __dlpack_device__(self) -> tuple[int, int]:
        if self._device is not None:
            return (dlpack.CUDA, self._device.device_id)
        return (dlpack.CPU, 0)

    @staticmethod
    def from_dlpack(name: str, dlpack_tensor: Any) -> Tensor:
        """Take in a DLPack capsule or an object with ``__dlpack__`` (torch, cupy, numpy,
        jax...) without copying."""
        if name == "":
            raise TritonModelException("Tensor name cannot be an empty string.")
        try:
            imported = dlpack.import_dlpack(dlpack_tensor)
        except dlpack.DLPackError as exc:
            raise TritonModelException(str(exc)) from None
        if isinstance(imported, dlpack.DeviceTensor):
            tensor = Tensor.__new__(Tensor)
            tensor._name = name
            tensor._device = imported
            tensor._array = np.empty(0, dtype=imported.dtype)
            tensor._dtype = _dtype_code(name, imported.dtype)
            return tensor
        return Tensor(name, imported)

    def host_array(self) -> Array:
        """The data in host memory as it travels to the server: the array itself (BF16 as
        its uint16 patterns), or one copy from the GPU."""
        if self._device is not None:
            return self._device.to_host()
        return self._array.view(np.uint16) if self._dtype == BF16 else self._array


def _dtype_code(name: str, dtype: np.dtype[Any]) -> int:
    # The dtype itself first: numpy_to_triton_type's np.dtype() and checks cost more
    # than the lookup, for every tensor a model builds or receives.
    code = _NUMPY_TO_CODE.get(dtype)
    if code is not None:
        return code
    code = numpy_to_triton_type(dtype)
    if code is None:
        raise TritonModelException(
            f"tensor '{name}': numpy dtype {dtype} is not supported by the "
            "python backend; use np.object_ for strings"
        )
    return code
