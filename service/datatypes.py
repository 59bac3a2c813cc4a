"""The v2 datatype table: wire name, numpy storage, element size, typed-contents field.

One table serves decoding, validation, backends and encoding, so a datatype is added in
exactly one place. BF16 has no numpy dtype without extra packages; it is stored as its raw
16-bit pattern (``uint16``) and the datatype name travels beside the array.
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
    "DataType",
    "config_type_for",
    "datatype_from_config",
    "deserialize_bytes_tensor",
    "element_count",
    "lookup",
    "serialize_bytes_tensor",
]


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


def deserialize_bytes_tensor(buffer: bytes | memoryview, count: int) -> npt.NDArray[np.object_]:
    """Split the 4-byte little-endian length-prefixed BYTES wire form into ``count`` items.

    Raises ValueError when the buffer does not hold exactly ``count`` well-formed items.
    """
    view = memoryview(buffer)
    items: list[bytes] = []
    offset, end = 0, len(view)
    while offset < end:
        if len(items) == count:  # stop early: a hostile buffer of tiny items stays cheap
            raise ValueError(f"holds more than {count} elements")
        if offset + 4 > end:
            raise ValueError("truncated length prefix")
        (length,) = _LEN.unpack_from(view, offset)
        offset += 4
        if offset + length > end:
            raise ValueError("element runs past the end of the buffer")
        items.append(bytes(view[offset : offset + length]))
        offset += length
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
