"""Synthetic ModelInferRequests, built once from a tensor signature and reused for every call.

Shared by the load generator (signature read from ModelMetadata) and the ghz config writer
(signature given statically), so both tools send byte-identical payloads for a scenario.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from inference import grpc_service_pb2 as pb

__all__ = ["InputSpec", "SyntheticInput", "infer_request", "specs_from_metadata", "synthesize"]

#: KServe v2 datatypes that have a plain numpy dtype (BYTES and BF16 have none).
NUMPY_DTYPES: dict[str, str] = {
    "BOOL": "bool",
    "UINT8": "uint8",
    "UINT16": "uint16",
    "UINT32": "uint32",
    "UINT64": "uint64",
    "INT8": "int8",
    "INT16": "int16",
    "INT32": "int32",
    "INT64": "int64",
    "FP16": "float16",
    "FP32": "float32",
    "FP64": "float64",
}


@dataclass(frozen=True)
class InputSpec:
    """One model input as ModelMetadata reports it: -1 marks a variable dimension."""

    name: str
    datatype: str
    shape: tuple[int, ...]


@dataclass(frozen=True)
class SyntheticInput:
    """A concrete tensor ready for ``raw_input_contents`` (little-endian bytes)."""

    name: str
    datatype: str
    shape: tuple[int, ...]
    data: bytes


def specs_from_metadata(meta: pb.ModelMetadataResponse) -> list[InputSpec]:
    """Input specs of a ModelMetadata answer, in the model's input order."""
    return [InputSpec(t.name, t.datatype, tuple(int(d) for d in t.shape)) for t in meta.inputs]


def concrete_shape(shape: Sequence[int], batch: int, dynamic_dim: int) -> tuple[int, ...]:
    """Replace the first -1 with ``batch`` and any later -1 with ``dynamic_dim``.

    Triton reports a batching model's batch dimension as a leading -1, so the first variable
    dimension is taken as the batch; the others are the model's own variable sizes.
    """
    out: list[int] = []
    batch_used = False
    for dim in shape:
        if dim >= 0:
            out.append(dim)
        elif not batch_used:
            out.append(batch)
            batch_used = True
        else:
            out.append(dynamic_dim)
    return tuple(out)


def batch_of(specs: Iterable[InputSpec], batch: int) -> int:
    """Inferences one request carries: ``batch`` if the inputs have a variable dim, else 1."""
    return batch if any(-1 in spec.shape for spec in specs) else 1


def synthesize(
    specs: Sequence[InputSpec], *, batch: int = 1, dynamic_dim: int = 16, seed: int = 0
) -> list[SyntheticInput]:
    """Random tensors for ``specs``; the seed makes payloads identical across runs and tools."""
    rng = np.random.default_rng(seed)
    tensors = []
    for spec in specs:
        if spec.datatype not in NUMPY_DTYPES:
            raise ValueError(f"input '{spec.name}': datatype {spec.datatype} is not supported")
        shape = concrete_shape(spec.shape, batch, dynamic_dim)
        dtype = np.dtype(NUMPY_DTYPES[spec.datatype]).newbyteorder("<")
        if dtype.kind == "f":
            arr = rng.standard_normal(shape).astype(dtype)
        elif dtype.kind == "b":
            arr = rng.integers(0, 2, shape).astype(dtype)
        else:
            arr = rng.integers(0, 10, shape).astype(dtype)
        tensors.append(SyntheticInput(spec.name, spec.datatype, shape, arr.tobytes()))
    return tensors


def infer_request(
    model: str, tensors: Sequence[SyntheticInput], version: str = ""
) -> pb.ModelInferRequest:
    """A ModelInferRequest carrying the tensors in ``raw_input_contents`` (no typed contents)."""
    request = pb.ModelInferRequest(model_name=model, model_version=version)
    for tensor in tensors:
        request.inputs.add(name=tensor.name, datatype=tensor.datatype, shape=tensor.shape)
        request.raw_input_contents.append(tensor.data)
    return request
