"""v2 datatypes: JSON ``data`` and raw little-endian bytes, converted through numpy.

Numeric tensors never become per-element Python objects here: JSON arrays go through one
``np.array`` call and raw bytes through ``np.frombuffer``; orjson writes numpy arrays as
JSON directly. Only BYTES tensors, whose elements are strings by nature, are handled one
element at a time. FP16 and BF16 travel as JSON numbers (Triton refuses them in JSON; we
accept them, rounding to nearest even). NaN and infinities are written as ``null``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from wire import datatypes
from wire.datatypes import bf16_bits, bf16_to_float32, serialize_bytes_tensor

from .errors import GatewayError

__all__ = ["DATATYPES", "element_count", "json_to_raw", "raw_to_json", "split_bytes"]

#: Every v2 datatype -> the numpy dtype of its raw little-endian form (None for BYTES), from
#: the one table both processes share. BF16 is carried as its 16-bit pattern (uint16).
DATATYPES: dict[str, np.dtype[Any] | None] = {
    name: None if name == "BYTES" else kind.numpy.newbyteorder("<")
    for name, kind in datatypes.DATATYPES.items()
}

_FLOATS = frozenset({"FP16", "FP32", "FP64", "BF16"})


def element_count(shape: Sequence[int]) -> int:
    return math.prod(shape)


def split_bytes(raw: bytes | memoryview, where: str) -> list[bytes]:
    """The elements of a BYTES tensor's wire form; a malformed one is a 400."""
    try:
        return datatypes.split_bytes(raw)
    except datatypes.BytesFormatError as error:
        if error.reason == "truncated length":
            text = f"truncated BYTES element length at byte {error.offset}"
        else:
            text = f"BYTES element of {error.length} bytes overruns the data"
        raise GatewayError(400, f"{where}: {text}") from None


def _leaves(data: list[Any]) -> list[Any]:
    """The elements of a nested JSON array, in order, whatever its nesting."""
    out: list[Any] = []
    stack: list[Any] = [iter(data)]
    while stack:
        for item in stack[-1]:
            if isinstance(item, list):
                stack.append(iter(item))
                break
            out.append(item)
        else:
            stack.pop()
    return out


def _data_error(reason: str) -> GatewayError:
    return GatewayError(400, f"Unable to parse 'data': {reason}")


#: Triton's texts (TritonJson) for an element of the wrong JSON type, by datatype kind.
_WRONG_TYPE = {
    "BOOL": "attempt to access JSON non-boolean as boolean",
    "INT": "attempt to access JSON non-signed-integer as signed-integer",
    "UINT": "attempt to access JSON non-unsigned-integer as unsigned-integer",
    "FP": "attempt to access JSON non-number as double",
    "BF": "attempt to access JSON non-number as double",
}


def _numeric(data: list[Any], datatype: str, where: str) -> np.ndarray[Any, Any]:
    try:
        array = np.array(data)
    except (ValueError, TypeError):  # ragged nesting: Triton reads the elements in order
        array = np.array(_leaves(data))
    if array.size == 0:
        return array
    kind = array.dtype.kind
    if kind in "fO" and datatype in ("UINT64", "INT64"):
        array = _wide_integers(data, array)
        kind = array.dtype.kind
    family = datatype.rstrip("0123456789")
    if datatype == "BOOL":
        ok = kind == "b"
    elif datatype in _FLOATS:
        ok = kind in "iuf"
    else:
        ok = kind in "iu" and (family == "INT" or int(array.min()) >= 0)
    if not ok:
        raise _data_error(_WRONG_TYPE[family])
    if kind in "iu" and datatype not in _FLOATS and datatype != "BOOL":
        info = np.iinfo(DATATYPES[datatype])
        low, high = int(array.min()), int(array.max())
        if low < info.min or high > info.max:
            raise GatewayError(
                400, f"{where}: value out of range for {datatype} [{info.min}, {info.max}]"
            )
    return array


def _wide_integers(data: list[Any], inferred: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """numpy promotes a mix of int64-only and uint64-only values to float64 (or object):
    redo it exactly when every element is an int (the rare case of full-range 64-bit data).
    """
    values = np.array(_leaves(data), dtype=object)
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return inferred
    if all(v >= 0 for v in values) and max(values) <= np.iinfo(np.uint64).max:
        return np.array(values, dtype=np.uint64)
    if min(values) >= np.iinfo(np.int64).min and max(values) <= np.iinfo(np.int64).max:
        return np.array(values, dtype=np.int64)
    return inferred


def json_to_raw(data: Any, datatype: str, shape: Sequence[int], where: str) -> bytes:
    """JSON ``data`` (nested or flat) -> the tensor's raw bytes, as Triton's frontend reads
    it (``ReadDataFromJson``, its texts): elements of the datatype's JSON type, as many as
    ``shape`` holds; ``data`` of an empty tensor is not read. BYTES elements are not
    counted here (Triton leaves that to the core: the service checks them)."""
    expected = element_count(shape)
    if expected == 0:
        return b""
    if not isinstance(data, list):
        raise _data_error("attempt to access JSON non-array as array")
    if datatype == "BYTES":
        items = _leaves(data)
        if not all(isinstance(item, str) for item in items):
            raise GatewayError(
                400, "Unable to parse JSON bytes array: attempt to access JSON non-string as string"
            )
        return serialize_bytes_tensor([item.encode("utf-8") for item in items])
    array = _numeric(data, datatype, where)
    if array.size != expected:
        raise _data_error("Shape does not match true shape of 'data' field")
    if datatype == "BF16":
        return bf16_bits(array).tobytes()
    with np.errstate(over="ignore", invalid="ignore"):
        return np.ascontiguousarray(array, dtype=DATATYPES[datatype]).tobytes()


def raw_to_json(raw: bytes, datatype: str, shape: Sequence[int], where: str) -> Any:
    """Raw bytes -> what orjson writes as the JSON ``data`` array (numpy array or strings)."""
    expected = element_count(shape)
    dtype = DATATYPES.get(datatype)
    if datatype == "BYTES":
        items = split_bytes(raw, where)
        if len(items) != expected:
            raise GatewayError(
                500, f"{where}: {len(items)} BYTES elements do not match shape {list(shape)}"
            )
        try:
            return [item.decode("utf-8") for item in items]
        except UnicodeDecodeError:
            raise GatewayError(
                400,
                f"{where} holds bytes that are not UTF-8, which JSON cannot carry; "
                "request it with binary_data",
            ) from None
    if dtype is None:
        raise GatewayError(500, f"{where}: unknown datatype {datatype!r}")
    if len(raw) != expected * dtype.itemsize:
        raise GatewayError(
            500, f"{where}: {len(raw)} bytes do not match shape {list(shape)} of {datatype}"
        )
    array = np.frombuffer(raw, dtype=dtype)
    if datatype == "BF16":
        return bf16_to_float32(array)
    return array
