"""Protobuf messages <-> core types. The only module that reads tensor protobufs.

Raw inputs stay as the ``bytes`` protobuf hands out; numpy views them later without a
copy. Outputs always travel as ``raw_output_contents``, as Triton sends them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from inference import grpc_service_pb2 as pb
from inference import model_config_pb2 as mc
from wire import datatypes

from ..core.index import IndexEntry
from ..core.inference_server import ModelMetadata, ServerMetadata, VersionStats
from ..errors import InvalidArgument, ResourceExhausted
from ..repository.load_parameters import FILE_PREFIX, config_override, file_contents
from ..shm import CudaRegionStatus, SystemRegionStatus
from ..statistics import Duration
from ..types import (
    InferRequest,
    InferResponse,
    InputTensor,
    OutputTensor,
    ParameterValue,
    RequestedOutput,
    TensorSpec,
    UInt64,
)
from .encoded_response import EncodedInferResponse, encode_small_response
from .large_messages import SPLIT_MIN_BYTES, WireInferResponse

__all__ = [
    "decode_infer_request",
    "decode_load_request",
    "encode_cuda_shm_status",
    "encode_infer_response",
    "encode_model_metadata",
    "encode_model_statistics",
    "encode_repository_index",
    "encode_server_metadata",
    "encode_system_shm_status",
]


_INT64_MAX = (1 << 63) - 1


def decode_parameters(params: Mapping[str, pb.InferParameter]) -> dict[str, ParameterValue]:
    out: dict[str, ParameterValue] = {}
    for key, param in params.items():
        which = param.WhichOneof("parameter_choice")
        if which == "uint64_param":
            out[key] = UInt64(param.uint64_param)
        elif which is not None:
            out[key] = getattr(param, which)
    return out


def encode_parameters(target: Any, params: Mapping[str, ParameterValue]) -> None:
    for key, value in params.items():
        slot = target[key]
        if isinstance(value, bool):
            slot.bool_param = value
        elif isinstance(value, int):
            if isinstance(value, UInt64) or value > _INT64_MAX:
                slot.uint64_param = value
            else:
                slot.int64_param = value
        elif isinstance(value, float):
            slot.double_param = value
        else:
            slot.string_param = value


def _flat_contents(values: Any, dtype: np.dtype[Any], where: str) -> np.ndarray[Any, Any]:
    if dtype == np.object_:
        out = np.empty(len(values), dtype=np.object_)
        out[:] = list(values)
        return out
    if dtype.kind in "iu" and dtype.itemsize < 8 and len(values):
        wide = np.asarray(values, dtype=np.int64)
        info = np.iinfo(dtype)
        if wide.min() < info.min or wide.max() > info.max:
            raise InvalidArgument(
                f"{where} holds values outside the range of {dtype.name} [{info.min}, {info.max}]"
            )
        return wide.astype(dtype)
    return np.asarray(values, dtype=dtype)


# Each InferTensorContents field: the Triton datatype it carries, by declared datatype
# (int_contents / uint_contents carry the narrow types as well), in the order Triton's
# gRPC frontend reads them.
_FIELD_TYPES: dict[str, dict[str, str]] = {
    "bool_contents": {},
    "int_contents": {"INT8": "INT8", "INT16": "INT16"},
    "int64_contents": {},
    "uint_contents": {"UINT8": "UINT8", "UINT16": "UINT16"},
    "uint64_contents": {},
    "fp32_contents": {},
    "fp64_contents": {},
    "bytes_contents": {},
}
_FIELD_DEFAULT = {
    "bool_contents": "BOOL",
    "int_contents": "INT32",
    "int64_contents": "INT64",
    "uint_contents": "UINT32",
    "uint64_contents": "UINT64",
    "fp32_contents": "FP32",
    "fp64_contents": "FP64",
    "bytes_contents": "BYTES",
}


def _decode_contents(request: pb.ModelInferRequest, tensor: Any) -> np.ndarray[Any, Any]:
    """Typed contents as Triton's gRPC frontend takes them: each non-empty field must be
    the declared datatype's field, and only one field may carry data."""
    where = f"input tensor '{tensor.name}' for model '{request.model_name}'"
    declared = datatypes.lookup(tensor.datatype)
    declared_name = declared.name if declared is not None else "<invalid>"
    chosen: Any = None
    for field, values in tensor.contents.ListFields():
        carried = _FIELD_TYPES[field.name].get(tensor.datatype, _FIELD_DEFAULT[field.name])
        if chosen is not None:
            raise InvalidArgument(
                f"unexpected explicit tensor data for {where}, binary data was already supplied."
            )
        if carried != declared_name:
            raise InvalidArgument(
                f"unexpected explicit tensor data for {where} of type '{carried}', expected "
                f"datatype '{declared_name}'"
            )
        chosen = values
    if declared is None or chosen is None:  # no elements: an empty tensor
        return np.empty(0, dtype=declared.numpy if declared is not None else np.uint8)
    return _flat_contents(
        chosen, declared.numpy, f"input '{tensor.name}' for model '{request.model_name}'"
    )


def decode_infer_request(request: pb.ModelInferRequest) -> InferRequest:
    """The gRPC frontend's own checks come first, in input order, as in Triton: typed
    contents beside raw_input_contents, contents of the wrong type, an input without data.
    Raw contents pair in order with the inputs that are neither in shared memory nor
    given as typed contents; extra ones are ignored, as Triton does. Shared-memory inputs
    are resolved by the core (``service/shm``).

    Runs for every request: each protobuf field is read once (a read of a raw entry
    copies its bytes; ``shape[:]`` copies a repeated field twice as fast as iterating it,
    and a slice of a repeated message field is walked faster than the field itself).
    """
    raw = request.raw_input_contents
    available = len(raw)
    inputs = []
    index = 0
    for tensor in request.inputs[:]:
        contents = None
        data = None
        parameters = tensor.parameters
        if parameters and "shared_memory_region" in parameters:
            pass  # the core reads the region (and refuses typed contents beside it)
        elif tensor.HasField("contents"):
            if available:
                raise InvalidArgument(
                    "contents field must not be specified when using raw_input_contents for "
                    f"'{tensor.name}' for model '{request.model_name}'"
                )
            contents = _decode_contents(request, tensor)
        elif index < available:
            data = raw[index]
            index += 1
        else:
            raise InvalidArgument(
                f"unable to find data for input tensor '{tensor.name}' for model "
                f"'{request.model_name}' in request."
            )
        inputs.append(
            InputTensor(
                tensor.name,
                tensor.datatype,
                tuple(tensor.shape[:]),
                data,
                contents,
                decode_parameters(parameters) if parameters else {},
            )
        )
    outputs = request.outputs
    parameters = request.parameters
    return InferRequest(
        request.model_name,
        request.model_version,
        request.id,
        inputs,
        [
            RequestedOutput(o.name, decode_parameters(o.parameters) if o.parameters else {})
            for o in outputs[:]
        ]
        if outputs
        else [],
        decode_parameters(parameters) if parameters else {},
    )


def _raw(datatype: str, array: np.ndarray[Any, Any]) -> bytes | memoryview:
    """The output's wire bytes, copied once; an output that is an untouched view of a
    request's bytes (identity-like models) is sent as that very object, uncopied."""
    if datatype == "BYTES":
        return datatypes.serialize_bytes_tensor(array)
    if array.flags.c_contiguous:
        base: Any = array.base
        while isinstance(base, np.ndarray):
            base = base.base
        if type(base) is bytes and len(base) == array.nbytes:
            return base  # contiguous over all of it: exactly what tobytes() would copy
        if type(base) is memoryview and base.nbytes == array.nbytes:
            return base  # the same, over a large request's bytes (large_messages.py)
    return array.tobytes()


# Room for what wraps a response on the wire: the stream message's field tag and length.
_ENVELOPE_BYTES = 16


def _too_large(model: str, size: int, max_bytes: int) -> ResourceExhausted:
    return ResourceExhausted(
        f"response for model '{model}' is {size} bytes, more than the server's max message "
        f"size {max_bytes}"
    )


def encode_infer_response(response: InferResponse, max_bytes: int) -> pb.ModelInferResponse:
    """Raises ResourceExhausted, naming the model, when the message would exceed the limit."""
    message, raw, size = _encode(response, max_bytes)
    message.raw_output_contents.extend(_as_bytes(raw))
    _check_total(response, message, size, max_bytes)
    return message


def _as_bytes(raw: list[bytes | memoryview]) -> list[bytes]:
    """What protobuf's repeated bytes take: a view (of a split request) becomes bytes."""
    return [r if type(r) is bytes else bytes(r) for r in raw]


def encode_unary_infer_response(
    response: InferResponse, max_bytes: int
) -> pb.ModelInferResponse | WireInferResponse | EncodedInferResponse:
    """``encode_infer_response`` for a unary answer, whose serializer takes either kind:
    large outputs stay out of the message and are written after it, copied once
    (``large_messages.py``). A small one without parameters, far from the limit, is
    written straight to its wire bytes (``encoded_response.py``)."""
    raw = _raw_outputs(response.outputs)
    size = sum(map(len, raw))
    if not response.parameters and size < SPLIT_MIN_BYTES and size + 65536 <= max_bytes:
        # _check_total would find nothing to refuse this far from the limit
        return EncodedInferResponse(encode_small_response(response, _as_bytes(raw)))
    message = _message(response, size, max_bytes)
    if size < SPLIT_MIN_BYTES:
        message.raw_output_contents.extend(_as_bytes(raw))
        _check_total(response, message, size, max_bytes)
        return message
    wire = WireInferResponse(message, raw)
    _check_total(response, message, size + 16 * len(raw), max_bytes)
    return wire


def _raw_outputs(outputs: list[OutputTensor]) -> list[bytes | memoryview]:
    return [o.wire if o.wire is not None else _raw(o.datatype, o.array) for o in outputs]


def _encode(
    response: InferResponse, max_bytes: int
) -> tuple[pb.ModelInferResponse, list[bytes | memoryview], int]:
    """The message without its raw outputs, the raw outputs and their size."""
    raw = _raw_outputs(response.outputs)
    size = sum(map(len, raw))
    return _message(response, size, max_bytes), raw, size


def _message(response: InferResponse, size: int, max_bytes: int) -> pb.ModelInferResponse:
    """The message without its raw outputs (``size`` bytes in all)."""
    outputs = response.outputs
    if size > max_bytes:
        raise _too_large(response.model_name, size, max_bytes).with_request_id(response.id)
    message = pb.ModelInferResponse(
        model_name=response.model_name, model_version=response.model_version, id=response.id
    )
    add = message.outputs.add
    for output in outputs:  # add() and extend() skip building a message to copy in
        tensor = add()
        tensor.name = output.name
        tensor.datatype = output.datatype
        tensor.shape.extend(output.array.shape)
    if response.parameters:
        encode_parameters(message.parameters, response.parameters)
    return message


def _check_total(
    response: InferResponse, message: pb.ModelInferResponse, size: int, max_bytes: int
) -> None:
    """Near the limit, the exact size of the message (``size``: what it does not hold)."""
    if size + 65536 > max_bytes:  # only near the limit is the exact size worth computing
        total = message.ByteSize() + _ENVELOPE_BYTES
        if not message.raw_output_contents:
            total += size
        if total > max_bytes:
            raise _too_large(response.model_name, total, max_bytes).with_request_id(response.id)


def encode_system_shm_status(
    regions: Iterable[SystemRegionStatus],
) -> pb.SystemSharedMemoryStatusResponse:
    Status = pb.SystemSharedMemoryStatusResponse.RegionStatus
    return pb.SystemSharedMemoryStatusResponse(
        regions={
            r.name: Status(name=r.name, key=r.key, offset=r.offset, byte_size=r.byte_size)
            for r in regions
        }
    )


def encode_cuda_shm_status(
    regions: Iterable[CudaRegionStatus],
) -> pb.CudaSharedMemoryStatusResponse:
    Status = pb.CudaSharedMemoryStatusResponse.RegionStatus
    return pb.CudaSharedMemoryStatusResponse(
        regions={
            r.name: Status(name=r.name, device_id=r.device_id, byte_size=r.byte_size)
            for r in regions
        }
    )


def encode_server_metadata(meta: ServerMetadata) -> pb.ServerMetadataResponse:
    return pb.ServerMetadataResponse(
        name=meta.name, version=meta.version, extensions=list(meta.extensions)
    )


def _tensor_metadata(
    specs: Iterable[TensorSpec],
) -> list[pb.ModelMetadataResponse.TensorMetadata]:
    return [
        pb.ModelMetadataResponse.TensorMetadata(name=s.name, datatype=s.datatype, shape=s.shape)
        for s in specs
    ]


def encode_model_metadata(meta: ModelMetadata) -> pb.ModelMetadataResponse:
    return pb.ModelMetadataResponse(
        name=meta.name,
        versions=meta.versions,
        platform=meta.platform,
        inputs=_tensor_metadata(meta.inputs),
        outputs=_tensor_metadata(meta.outputs),
    )


def _duration(d: Duration) -> pb.StatisticDuration:
    return pb.StatisticDuration(count=d.count, ns=d.ns)


def encode_model_statistics(entries: Iterable[VersionStats]) -> pb.ModelStatisticsResponse:
    out = []
    for entry in entries:
        s = entry.stats
        out.append(
            pb.ModelStatistics(
                name=entry.name,
                version=str(entry.version),
                last_inference=s.last_inference_ms,
                inference_count=s.inference_count,
                execution_count=s.execution_count,
                inference_stats=pb.InferStatistics(
                    success=_duration(s.success),
                    fail=_duration(s.fail),
                    queue=_duration(s.queue),
                    compute_input=_duration(s.compute_input),
                    compute_infer=_duration(s.compute_infer),
                    compute_output=_duration(s.compute_output),
                    cache_hit=_duration(s.cache_hit),
                    cache_miss=_duration(s.cache_miss),
                ),
                response_stats={
                    str(index): pb.InferResponseStatistics(
                        compute_infer=_duration(r.compute_infer),
                        compute_output=_duration(r.compute_output),
                        success=_duration(r.success),
                        fail=_duration(r.fail),
                        empty_response=_duration(r.empty_response),
                        cancel=_duration(r.cancel),
                    )
                    for index, r in sorted(s.responses.items())
                },
                memory_usage=[
                    pb.MemoryUsage(type="CPU", id=0, byte_size=s.memory_bytes),
                    *(
                        pb.MemoryUsage(type="GPU", id=gpu, byte_size=size)
                        for gpu, size in sorted(s.gpu_memory_bytes.items())
                    ),
                ],
                batch_stats=[
                    pb.InferBatchStatistics(
                        batch_size=size,
                        compute_input=_duration(b.compute_input),
                        compute_infer=_duration(b.compute_infer),
                        compute_output=_duration(b.compute_output),
                    )
                    for size, b in sorted(s.batches.items())
                ],
            )
        )
    return pb.ModelStatisticsResponse(model_stats=out)


def decode_load_request(
    request: pb.RepositoryModelLoadRequest,
) -> tuple[mc.ModelConfig | None, dict[str, bytes]]:
    """The 'config' override (JSON ModelConfig) and the 'file:<version>/<name>' contents
    (repository/load_parameters.py), each checked for the kind of value it must carry."""
    name = request.model_name
    override = None
    files: dict[str, bytes] = {}
    for key, param in request.parameters.items():
        which = param.WhichOneof("parameter_choice")
        if key == "config":
            if which != "string_param":
                raise InvalidArgument(
                    f"failed to load '{name}': parameter 'config' must be a JSON string"
                )
            override = config_override(name, param.string_param)
        elif key.startswith(FILE_PREFIX):
            if which != "bytes_param":
                raise InvalidArgument(
                    f"failed to load '{name}': parameter '{key}' must carry bytes"
                )
            files[key] = param.bytes_param
    return override, file_contents(files)


def encode_repository_index(entries: Iterable[IndexEntry]) -> pb.RepositoryIndexResponse:
    return pb.RepositoryIndexResponse(
        models=[
            pb.RepositoryIndexResponse.ModelIndex(
                name=e.name, version=e.version, state=e.state, reason=e.reason
            )
            for e in entries
        ]
    )
