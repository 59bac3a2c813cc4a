"""The legacy v1 API's messages <-> core types: inference requests and responses, errors.

A v1 request describes inputs per batch entry (``dims`` without the batch dimension,
``batch_size`` apart) and may leave fixed shapes out; this module completes them from
the model config, checks what only v1 has (batch size, one ``raw_input`` per input and
its byte size) with the 1.11 server's texts, and hands the core an ordinary
``InferRequest``, so validation, batching, sequences and statistics are the v2 path's.
The sequence flags and correlation id become the same request parameters a v2 client
sends.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from inference import model_config_pb2 as mc
from trtis import api_pb2 as api
from trtis import grpc_service_pb2 as gs
from trtis import model_config_pb2 as v1mc
from trtis import request_status_pb2 as rs
from wire import datatypes

from ..core.classification import CLASSIFIABLE, top_classes
from ..errors import ErrorCode, InvalidArgument, ServerError
from ..types import InferRequest, InferResponse, InputTensor, OutputTensor, RequestedOutput

__all__ = [
    "V1_CODES",
    "decode_v1_infer",
    "encode_v1_infer",
    "request_status",
    "v1_config",
    "v1_version",
]

#: Core error class -> v1 RequestStatusCode (v1 has no RESOURCE_EXHAUSTED: a full queue
#: is "try again later", UNAVAILABLE).
V1_CODES: dict[ErrorCode, rs.RequestStatusCode] = {
    ErrorCode.INVALID_ARGUMENT: rs.INVALID_ARG,
    ErrorCode.NOT_FOUND: rs.NOT_FOUND,
    ErrorCode.ALREADY_EXISTS: rs.ALREADY_EXISTS,
    ErrorCode.UNAVAILABLE: rs.UNAVAILABLE,
    ErrorCode.RESOURCE_EXHAUSTED: rs.UNAVAILABLE,
    ErrorCode.UNIMPLEMENTED: rs.UNSUPPORTED,
    ErrorCode.CANCELLED: rs.UNKNOWN,
    ErrorCode.INTERNAL: rs.INTERNAL,
    ErrorCode.UNKNOWN: rs.UNKNOWN,
}

_START = api.InferRequestHeader.FLAG_SEQUENCE_START
_END = api.InferRequestHeader.FLAG_SEQUENCE_END


def request_status(
    server_id: str, request_id: int, error: ServerError | None = None
) -> rs.RequestStatus:
    """SUCCESS, or the error's v1 code and message."""
    if error is None:
        return rs.RequestStatus(code=rs.SUCCESS, server_id=server_id, request_id=request_id)
    return rs.RequestStatus(
        code=V1_CODES[error.code], msg=error.message, server_id=server_id, request_id=request_id
    )


def v1_version(version: int) -> str:
    """v1 asks for the newest ready version with -1 (0, the proto default, alike)."""
    return str(version) if version > 0 else ""


def v1_config(config: mc.ModelConfig) -> v1mc.ModelConfig:
    """The v1 view of a config: the fields both share keep their numbers and types, so the
    wire bytes convert; what v1 does not know (backend, ...) is dropped."""
    out = v1mc.ModelConfig.FromString(config.SerializeToString())
    out.DiscardUnknownFields()
    return out


def _dims(dims: Sequence[int]) -> str:
    return "[" + ",".join(str(d) for d in dims) + "]"


def _datatype(data_type: int) -> str:
    return datatypes.datatype_from_config(mc.DataType.Name(data_type))


def _input_tensor(
    model: str,
    config: mc.ModelConfig,
    spec: mc.ModelInput,
    given: api.InferRequestHeader.Input,
    batch_size: int,
) -> tuple[InputTensor, int | None]:
    """The core tensor (raw bytes added later) and the byte size v1 expects (None: the
    size of a STRING input the header did not give; the core checks its contents)."""
    if given.dims:
        if len(given.dims) != len(spec.dims) or any(
            g < 0 or (c != -1 and c != g) for c, g in zip(spec.dims, given.dims, strict=False)
        ):
            raise InvalidArgument(
                f"unexpected shape for input '{given.name}' for model '{model}'. "
                f"Expected {_dims(spec.dims)}, got {_dims(given.dims)}"
            )
        dims = tuple(given.dims)
    else:
        if any(d < 0 for d in spec.dims):
            raise InvalidArgument(
                f"model supports variable-size for input '{given.name}', request must "
                f"specify input shape for model '{model}'"
            )
        dims = tuple(spec.dims)
    datatype = _datatype(spec.data_type)
    batched = config.max_batch_size > 0
    shape = ((batch_size,) if batched else ()) + dims
    itemsize = datatypes.DATATYPES[datatype].itemsize
    expected: int | None = given.batch_byte_size or None
    if itemsize:
        expected = math.prod(shape) * itemsize
        if given.batch_byte_size and given.batch_byte_size != expected:
            raise InvalidArgument(
                f"specific batch-byte-size for input '{given.name}' does not match expected "
                f"byte-size calculated from shape and datatype for model '{model}'"
            )
    return InputTensor(name=given.name, datatype=datatype, shape=shape), expected


def decode_v1_infer(request: gs.InferRequest, config: mc.ModelConfig) -> InferRequest:
    """The core request for a v1 one; InvalidArgument with v1's texts where v1 checked."""
    header = request.meta_data
    model = config.name
    batch_size = header.batch_size
    if batch_size < 1:
        raise InvalidArgument(f"inference request batch-size must be >= 1 for '{model}'")
    if batch_size != 1 and batch_size > config.max_batch_size:
        raise InvalidArgument(
            f"inference request batch-size must be <= {config.max_batch_size} for '{model}'"
        )
    outputs = {o.name for o in config.output}
    for output in header.output:
        if output.name not in outputs:
            raise InvalidArgument(
                f"unexpected inference output '{output.name}' for model '{model}'"
            )
        if output.HasField("shared_memory"):
            raise InvalidArgument(
                f"Unable to find shared memory region: '{output.shared_memory.name}'"
            )
    specs = {i.name: i for i in config.input}
    inputs: list[InputTensor] = []
    raw = request.raw_input
    for index, given in enumerate(header.input):
        spec = specs.get(given.name)
        if spec is None:
            raise InvalidArgument(f"unexpected inference input '{given.name}' for model '{model}'")
        tensor, expected = _input_tensor(model, config, spec, given, batch_size)
        if given.HasField("shared_memory"):
            raise InvalidArgument(
                f"Unable to find shared memory region: '{given.shared_memory.name}'"
            )
        if index >= len(raw):
            # (sic) the 1.11 server's text counts the inputs before this one
            raise InvalidArgument(
                f"expected tensor data for at least {index} inputs but got only {len(raw)} "
                f"sets of data for model '{request.model_name}'"
            )
        data = raw[index]
        if expected is not None and len(data) != expected:
            raise InvalidArgument(
                f"unexpected size {len(data)} for input '{given.name}', expecting {expected} "
                f"for model '{request.model_name}'"
            )
        tensor.raw = data
        inputs.append(tensor)
    parameters: dict[str, bool | int | float | str] = {}
    if header.correlation_id:
        parameters["sequence_id"] = header.correlation_id
    if header.flags & _START:
        parameters["sequence_start"] = True
    if header.flags & _END:
        parameters["sequence_end"] = True
    return InferRequest(
        model_name=request.model_name,
        model_version=v1_version(request.model_version),
        inputs=inputs,
        outputs=[RequestedOutput(o.name) for o in header.output],
        parameters=parameters,
    )


def _raw(tensor: OutputTensor) -> bytes:
    if tensor.datatype == "BYTES":
        return datatypes.serialize_bytes_tensor(tensor.array)
    return np.ascontiguousarray(tensor.array).tobytes()


def _classes(
    model: str,
    config: mc.ModelConfig,
    tensor: OutputTensor,
    count: int,
    labels: Sequence[str],
) -> list[api.InferResponseHeader.Output.Classes]:
    if tensor.datatype not in CLASSIFIABLE:
        type_name = datatypes.config_type_for(tensor.datatype)
        raise InvalidArgument(
            f"class result not available for output '{tensor.name}' due to unsupported "
            f"type '{type_name}'"
        )
    batched = config.max_batch_size > 0
    Output = api.InferResponseHeader.Output
    return [
        Output.Classes(cls=[Output.Class(idx=e.index, value=e.value, label=e.label) for e in row])
        for row in top_classes(tensor.array, count, batched, labels)
    ]


def encode_v1_infer(
    request: gs.InferRequest,
    response: InferResponse,
    config: mc.ModelConfig,
    labels: Mapping[str, Sequence[str]],
    max_bytes: int,
) -> tuple[api.InferResponseHeader, list[bytes]]:
    """The response header and one ``raw_output`` per requested output, in request order
    (empty bytes for a classification output, as v1 sent)."""
    header = request.meta_data
    model = response.model_name
    batched = config.max_batch_size > 0
    by_name = {o.name: o for o in response.outputs}
    out = api.InferResponseHeader(
        id=header.id,
        model_name=model,
        model_version=int(response.model_version or 0),
        batch_size=header.batch_size,
    )
    raw_outputs: list[bytes] = []
    for wanted in header.output:
        tensor = by_name[wanted.name]
        entry = out.output.add(name=wanted.name)
        if wanted.HasField("cls"):
            classes = _classes(model, config, tensor, wanted.cls.count, labels.get(wanted.name, ()))
            entry.batch_classes.extend(classes)
            raw_outputs.append(b"")
            continue
        data = _raw(tensor)
        dims = tensor.shape[1:] if batched else tensor.shape
        entry.raw.dims.extend(dims)
        entry.raw.batch_byte_size = len(data)
        raw_outputs.append(data)
    size = sum(len(r) for r in raw_outputs)
    if size > max_bytes:
        raise InvalidArgument(
            f"Response has byte size {size} which exceeds gRPC's byte size limit {max_bytes}."
        )
    return out, raw_outputs
