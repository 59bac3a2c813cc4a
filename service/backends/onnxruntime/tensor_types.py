"""ONNX Runtime's type strings (``tensor(float)``) to v2 datatypes."""

from __future__ import annotations

from collections.abc import Sequence

from ...types import TensorSpec

__all__ = ["ORT_TO_V2", "tensor_spec"]

ORT_TO_V2 = {
    "tensor(bool)": "BOOL",
    "tensor(uint8)": "UINT8",
    "tensor(uint16)": "UINT16",
    "tensor(uint32)": "UINT32",
    "tensor(uint64)": "UINT64",
    "tensor(int8)": "INT8",
    "tensor(int16)": "INT16",
    "tensor(int32)": "INT32",
    "tensor(int64)": "INT64",
    "tensor(float16)": "FP16",
    "tensor(float)": "FP32",
    "tensor(double)": "FP64",
    "tensor(bfloat16)": "BF16",
    "tensor(string)": "BYTES",
}


def tensor_spec(name: str, ort_type: str, shape: Sequence[int | str | None]) -> TensorSpec | None:
    """None for values that are not plain tensors (sequences, maps, optional types)."""
    datatype = ORT_TO_V2.get(ort_type)
    if datatype is None:
        return None
    dims = tuple(d if isinstance(d, int) and d >= 0 else -1 for d in shape)
    return TensorSpec(name, datatype, dims)
