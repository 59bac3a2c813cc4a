"""The v2 datatype table: wire name, numpy storage, element size, typed-contents field; the
BYTES wire form (4-byte little-endian length before each element) and BF16's bit patterns.

One table serves decoding, validation, backends and encoding in the service and the JSON
conversions of the gateway, so a datatype is added in exactly one place. BF16 has no numpy
dtype without extra packages; it is stored as its raw 16-bit pattern (``uint16``) and the
datatype name travels beside the array.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = [
    "DATATYPES",
    "Array",
    "BytesFormatError",
    "DataType",
    "bf16_bits",
    "bf16_to_float32",
    "config_type_for",
    "datatype_from_config",
    "deserialize_bytes_tensor",
    "element_count",
    "lookup",
    "serialize_bytes_tensor",
    "split_bytes",
]

#: A tensor's values as numpy holds them (any dtype, any shape).
Array = npt.NDArray[Any]


@dataclass(frozen=True)
class DataType:
    """One v2 datatype and how it is stored and carried."""

    name: str
    numpy: np.dtype[Any]
    itemsize: int  # 0 for BYTES: variable length
    contents_field: str | None  # InferTensorContents field, None where only raw is allowed


def _dt(name: str, np_type: npt.DTypeLike, contents_field: str | None) -> DataType:
    dtype = np.dtype(np_type)
    return DataType(name, dtype, 0 if name == "BYTES" else dtype.itemsize, contents_field)


DATATYPES: dict[str, DataType] = {
    d.name: d
    for d in (
        _dt("BOOL", np.bool_, "bool_contents"),
        _dt("UINT8", np.uint8, "uint_contents"),
        _dt("UINT16", np.uint16, "uint_contents"),
        _dt("UINT32", np.uint32, "uint_contents"),
        _dt("UINT64", np.uint64, "uint64_contents"),
        _dt("INT8", np.int8, "int_contents"),
        _dt("INT16", np.int16, "int_contents"),
        _dt("INT32", np.int32, "int_contents"),
        _dt("INT64", np.int64, "int64_contents"),
        _dt("FP16", np.float16, None),
        _dt("FP32", np.float32, "fp32_contents"),
        _dt("FP64", np.float64, "fp64_contents"),
        _dt("BF16", np.uint16, None),
        _dt("BYTES", np.object_, "bytes_contents"),
    )
}


def lookup(name: str) -> DataType | None:
    return DATATYPES.get(name)


_BY_NUMPY = {dt.numpy: dt.name for dt in DATATYPES.values() if dt.name not in ("BF16", "BYTES")}


def datatype_of(dtype: np.dtype[Any]) -> str | None:
    """The datatype a numpy array is sent as (object and string arrays: BYTES; uint16
    is UINT16, never BF16); None for a type the protocol has no name for."""
    if dtype.kind in "OSU":
        return "BYTES"
    return _BY_NUMPY.get(dtype)


def datatype_from_config(config_type_name: str) -> str:
    """``TYPE_FP32`` -> ``FP32``; Triton's config calls BYTES ``TYPE_STRING``."""
    short = config_type_name.removeprefix("TYPE_")
    return "BYTES" if short == "STRING" else short


def config_type_for(datatype: str) -> str:
    """``FP32`` -> ``TYPE_FP32``, the inverse of :func:`datatype_from_config`."""
    return "TYPE_STRING" if datatype == "BYTES" else f"TYPE_{datatype}"


def element_count(shape: Iterable[int]) -> int:
    count = 1
    for dim in shape:
        count *= dim
    return count


_LEN = struct.Struct("<I")


class BytesFormatError(ValueError):
    """A BYTES wire form that does not parse; ``offset`` is where, each caller words it."""

    def __init__(self, reason: str, offset: int, length: int = 0) -> None:
        super().__init__(reason)
        self.reason = reason  # "truncated length", "overrun" or "too many"
        self.offset = offset
        self.length = length


def split_bytes(buffer: bytes | memoryview, limit: int | None = None) -> list[bytes]:
    """The elements of a BYTES wire form. Stops with BytesFormatError at a truncated length
    prefix, at an element that runs past the end, or once ``limit`` elements are followed
    by more (a hostile buffer of tiny items stays cheap)."""
    view = memoryview(buffer)
    items: list[bytes] = []
    offset, end = 0, len(view)
    while offset < end:
        if len(items) == limit:
            raise BytesFormatError("too many", offset)
        if offset + 4 > end:
            raise BytesFormatError("truncated length", offset)
        (length,) = _LEN.unpack_from(view, offset)
        if offset + 4 + length > end:
            raise BytesFormatError("overrun", offset, length)
        items.append(bytes(view[offset + 4 : offset + 4 + length]))
        offset += 4 + length
    return items


_SERVICE_TEXTS = {
    "truncated length": "truncated length prefix",
    "overrun": "element runs past the end of the buffer",
}


def deserialize_bytes_tensor(buffer: bytes | memoryview, count: int) -> npt.NDArray[np.object_]:
    """Split the 4-byte little-endian length-prefixed BYTES wire form into ``count`` items.

    Raises ValueError when the buffer does not hold exactly ``count`` well-formed items.
    """
    try:
        items = split_bytes(buffer, count)
    except BytesFormatError as error:
        if error.reason == "too many":
            raise ValueError(f"holds more than {count} elements") from None
        raise ValueError(_SERVICE_TEXTS[error.reason]) from None
    if len(items) != count:
        raise ValueError(f"holds {len(items)} elements, expected {count}")
    out = np.empty(len(items), dtype=np.object_)
    out[:] = items
    return out


def serialize_bytes_tensor(values: Sequence[Any] | npt.NDArray[Any]) -> bytes:
    """Length-prefix every element; ``str`` items are sent as UTF-8, other objects (a
    model's ints, floats, bools) as their ``str``, as Triton's python backend does."""
    parts: list[bytes] = []
    flat = values.ravel() if isinstance(values, np.ndarray) else values
    for item in flat:
        if isinstance(item, bytes):
            data = item
        elif isinstance(item, bytearray | memoryview):
            data = bytes(item)
        else:
            data = str(item).encode("utf-8")
        parts.append(_LEN.pack(len(data)))
        parts.append(data)
    return b"".join(parts)


def bf16_bits(values: Array) -> Array:
    """float values -> BF16 bit patterns (uint16), rounding to nearest even; NaN stays NaN."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    rounded = (bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)
    nan = (bits & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000)
    rounded[nan] = (bits[nan] >> np.uint32(16)) | np.uint32(0x0040)
    return rounded.astype(np.uint16)


def bf16_to_float32(bits: Array) -> Array:
    """BF16 bit patterns -> float32 (exact)."""
    return (bits.astype(np.uint32) << np.uint32(16)).view(np.float32)
