"""v2 REST inference JSON <-> ModelInferRequest / ModelInferResponse.

v2 REST JSON is not proto3 JSON (flat typed ``data``, binary parts, JSON parameters), so
this codec is written by hand. Every input travels to the service as
``raw_input_contents`` (JSON data is packed by numpy; binary parts are passed as slices of
the body), and outputs come back as ``raw_output_contents``, written as JSON arrays or
appended as binary parts as the request asked. Errors are Triton's texts, checked in
its order (docs/decisions/012-rest-gateway.md lists where we still differ: unknown fields
are refused, values outside a datatype's range are refused rather than cast, FP16/BF16 are
read from JSON numbers).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson

from inference import grpc_service_pb2 as pb
from wire.datatypes import serialize_bytes_tensor

from .binary import BinaryReader
from .errors import GatewayError
from .raw_messages import RawInferRequest
from .tensors import DATATYPES, json_to_raw, raw_to_json

__all__ = ["InferCall", "decode_infer", "encode_infer", "load_json", "set_parameter"]

_REQUEST_KEYS = frozenset({"id", "parameters", "inputs", "outputs", "model_name", "model_version"})
_INPUT_KEYS = frozenset({"name", "shape", "datatype", "parameters", "data"})
_OUTPUT_KEYS = frozenset({"name", "parameters"})
_INT64 = (-(2**63), 2**63 - 1)
_UINT64_MAX = 2**64 - 1


@dataclass(slots=True)
class InferCall:
    """The RPC request, plus how each output goes back (binary part, JSON data, or
    nothing: an output in shared memory is written there by the service). The request's
    raw inputs stay out of ``message``, in ``raw``, until it is sent (raw_messages.py)."""

    message: pb.ModelInferRequest
    default_binary: bool = False
    binary: dict[str, bool] = field(default_factory=dict)
    shared_memory: set[str] = field(default_factory=set)
    raw: list[bytes | memoryview] = field(default_factory=list)

    def output_is_binary(self, name: str) -> bool:
        return self.binary.get(name, self.default_binary)

    @property
    def outgoing(self) -> RawInferRequest:
        """The request for the service's local socket: the raw inputs sent uncopied."""
        return RawInferRequest(self.message, self.raw)

    @property
    def request(self) -> pb.ModelInferRequest:
        """The whole request as one protobuf message (a gRPC stub's; copies the inputs)."""
        return self.outgoing.whole()


def load_json(data: bytes | bytearray | memoryview, what: str) -> Any:
    """A JSON body; Triton's text when it is not JSON (``what`` is for our logs only)."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise GatewayError(
            400, f"failed to parse the request JSON buffer: {exc.msg} at {exc.pos}"
        ) from None


def _unknown_keys(value: dict[str, Any], where: str, allowed: frozenset[str]) -> None:
    unknown = sorted(set(value) - allowed)
    if unknown:
        raise GatewayError(
            400, f"unknown field(s) {unknown} in {where}; allowed: {sorted(allowed)}"
        )


def _member(doc: Any, key: str, what: str, expected: type) -> Any:
    """``doc[key]`` of the JSON type Triton's ``MemberAs...`` wants, or its text."""
    if not isinstance(doc, dict) or key not in doc:
        raise _unable(key, f"attempt to access non-existing object member '{key}'")
    value = doc[key]
    if type(value) is not expected:
        raise _unable(key, f"attempt to access JSON non-{what} as {what}")
    return value


def _unable(key: str, reason: str) -> GatewayError:
    return GatewayError(400, f"Unable to parse '{key}': {reason}")


_NOT_UINT = "attempt to access JSON non-unsigned-integer as unsigned-integer"
_NOT_BOOL = "attempt to access JSON non-boolean as boolean"
_SHM_REGION = "shared_memory_region"
_SHM_SIZES = ("shared_memory_offset", "shared_memory_byte_size")


def set_parameter(target: Any, value: Any, key: str) -> None:
    """A JSON scalar into an InferParameter (int64 unless it only fits uint64); anything
    else is Triton's invalid-type text."""
    if isinstance(value, bool):
        target.bool_param = value
    elif isinstance(value, int) and _INT64[0] <= value <= _UINT64_MAX:
        if value <= _INT64[1]:
            target.int64_param = value
        else:
            target.uint64_param = value
    elif isinstance(value, int | float):
        target.double_param = float(value)
    elif isinstance(value, str):
        target.string_param = value
    else:
        raise GatewayError(
            400,
            f"parameter '{key}' has invalid type. It should be either 'int', 'bool', or 'string'.",
        )


def decode_infer(
    header: Any, binary: BinaryReader, model_name: str, model_version: str
) -> InferCall:
    """The parsed JSON header (and the body's binary part) -> the RPC request, checked in
    Triton's order (id, parameters, inputs, outputs) with its texts."""
    if isinstance(header, dict):
        _unknown_keys(header, "the inference request", _REQUEST_KEYS)
        for key, bound in (("model_name", model_name), ("model_version", model_version)):
            if key in header and header[key] != bound:
                raise GatewayError(
                    400, f"'{key}' {header[key]!r} in the body differs from the URL's"
                )
    request = pb.ModelInferRequest(model_name=model_name, model_version=model_version)
    call = InferCall(request)
    doc: dict[str, Any] = header if isinstance(header, dict) else {}
    if "id" in doc:
        request.id = _member(doc, "id", "string", str)
    params = doc.get("parameters")
    if params is not None and not isinstance(params, dict):
        raise GatewayError(
            400, "failed to get request params.: attempt to get members for non-object"
        )
    for key, value in (params or {}).items():
        if key == "binary_data_output":
            call.default_binary = _member(params, key, "boolean", bool)
        elif key.startswith("triton_"):
            raise GatewayError(
                400,
                "parameter keys starting with 'triton_' are reserved for Triton usage and "
                "should not be specified.",
            )
        else:
            set_parameter(request.parameters[key], value, key)
    inputs = doc.get("inputs") if doc else None
    if not isinstance(inputs, list):
        _member(header, "inputs", "array", list)
    for item in inputs or ():
        _decode_input(call, item, binary)
    binary.finish()
    outputs = doc.get("outputs", [])
    if not isinstance(outputs, list):
        raise _unable("outputs", "attempt to access JSON non-array as array")
    for item in outputs:
        _decode_output(call, item)
    return call


def _content_type_error(item: Any) -> GatewayError:
    """Triton's ValidateInputContentType: exactly one of the three sources."""
    params = item.get("parameters") if isinstance(item, dict) else None
    given = [
        name
        for name, present in (
            ("data", isinstance(item, dict) and "data" in item),
            ("binary_data_size", isinstance(params, dict) and "binary_data_size" in params),
            ("shared_memory_region", isinstance(params, dict) and "shared_memory_region" in params),
        )
        if present
    ]
    text = (
        "Input must set only one of the following fields: 'data', 'binary_data_size' in "
        "'parameters', 'shared_memory_region' in 'parameters'. But"
    )
    text += " set " + " ".join(f"'{g}'" for g in given) if given else " no field is set"
    return GatewayError(400, text)


def _decode_input(call: InferCall, item: Any, binary: BinaryReader) -> None:
    # On the hot path: checks first, message strings only once something is wrong.
    if type(item) is not dict:
        raise _content_type_error(item)
    params = item.get("parameters")
    if params is None:
        params = {}
    elif type(params) is not dict:
        params = {}  # Triton finds nothing in a non-object
    has_data = "data" in item
    size = params.get("binary_data_size")
    if has_data + (size is not None) + ("shared_memory_region" in params) != 1:
        raise _content_type_error(item)
    if not item.keys() <= _INPUT_KEYS:
        _unknown_keys(item, f"input '{item.get('name')}'", _INPUT_KEYS)
    name = item.get("name")
    if type(name) is not str:
        name = _member(item, "name", "string", str)
    datatype = item.get("datatype")
    if type(datatype) is not str:
        datatype = _member(item, "datatype", "string", str)
    shape = item.get("shape")
    if type(shape) is not list or not all(type(d) is int and d >= 0 for d in shape):
        shape = _member(item, "shape", "array", list)
        raise _unable("shape", _NOT_UINT)
    tensor = call.message.inputs.add(name=name, datatype=datatype, shape=shape)
    if _SHM_REGION in params:
        _check_shared_memory(params)
        # Triton's HTTP frontend reads a missing byte size as 0; the gRPC form needs it.
        params = {"shared_memory_byte_size": 0, **params}
    for key, value in params.items():
        if key != "binary_data_size":
            set_parameter(tensor.parameters[key], value, key)
    if has_data:
        if datatype not in DATATYPES:
            raise GatewayError(400, f"invalid datatype for input {name}")
        where = f"input '{name}'"
        call.raw.append(json_to_raw(item["data"], datatype, shape, where))
    elif size is not None:
        if type(size) is not int or size < 0:
            raise _unable("binary_data_size", _NOT_UINT)
        call.raw.append(binary.take(size, name))
    # a shared-memory input takes no raw_input_contents entry: the service reads the region


def _check_shared_memory(params: dict[str, Any]) -> None:
    """Triton's CheckSharedMemoryData: a string region, unsigned offset and byte size."""
    if type(params[_SHM_REGION]) is not str:
        raise _unable(_SHM_REGION, "attempt to access JSON non-string as string")
    for key in _SHM_SIZES:
        value = params.get(key, 0)
        if type(value) is not int or value < 0:
            raise _unable(key, _NOT_UINT)


def _decode_output(call: InferCall, item: Any) -> None:
    name = _member(item, "name", "string", str)
    _unknown_keys(item, f"output '{name}'", _OUTPUT_KEYS)
    params = item.get("parameters", {})
    if not isinstance(params, dict):
        params = {}  # Triton finds nothing in a non-object
    if "shared_memory_region" in params:
        if "classification" in params:
            raise GatewayError(
                400, "Output can't set both 'shared_memory_region' and 'classification'"
            )
        if params.get("binary_data") is True:
            raise GatewayError(
                400, "Output can't set both 'shared_memory_region' and 'binary_data'"
            )
        _check_shared_memory(params)
        call.shared_memory.add(name)
    tensor = call.message.outputs.add(name=name)
    for key, value in params.items():
        if key == "binary_data":
            call.binary[name] = _member(params, key, "boolean", bool)
        elif key == "classification" and (type(value) is not int or value < 0):
            raise GatewayError(400, f"Unable to set 'classification': {_NOT_UINT}")
        elif key == "classification" and value == 0:
            continue  # Triton's REST frontend: 0 classes asks for the plain tensor
        else:
            set_parameter(tensor.parameters[key], value, key)


def parameter_value(param: pb.InferParameter) -> Any:
    which = param.WhichOneof("parameter_choice")
    return None if which is None else getattr(param, which)


def _json_parameters(params: Mapping[str, pb.InferParameter]) -> dict[str, Any]:
    return {key: parameter_value(value) for key, value in params.items()}


def encode_infer(
    response: pb.ModelInferResponse, call: InferCall
) -> tuple[bytes, list[bytes | memoryview]]:
    """(JSON header, binary parts in output order) for a ModelInferResponse."""
    doc: dict[str, Any] = {}
    if response.id:
        doc["id"] = response.id
    doc["model_name"] = response.model_name
    doc["model_version"] = response.model_version
    if response.parameters:
        doc["parameters"] = _json_parameters(response.parameters)
    raw = response.raw_output_contents
    parts: list[bytes | memoryview] = []
    outputs = []
    for index, tensor in enumerate(response.outputs):
        out: dict[str, Any] = {
            "name": tensor.name,
            "datatype": tensor.datatype,
            "shape": list(tensor.shape),
        }
        if tensor.name in call.shared_memory:  # written into its region: no data here
            outputs.append(out)
            continue
        params = _json_parameters(tensor.parameters) if tensor.parameters else {}
        data = raw[index] if index < len(raw) else _contents_bytes(tensor)
        if call.output_is_binary(tensor.name):
            params["binary_data_size"] = len(data)
            out["parameters"] = params
            if data:
                parts.append(data)
        else:
            if params:
                out["parameters"] = params
            where = f"output '{tensor.name}'"
            data = data if type(data) is bytes else bytes(data)  # a view of a large answer
            out["data"] = raw_to_json(data, tensor.datatype, tensor.shape, where)
        outputs.append(out)
    doc["outputs"] = outputs
    return orjson.dumps(doc, option=orjson.OPT_SERIALIZE_NUMPY), parts


def _contents_bytes(tensor: Any) -> bytes:
    """Outputs sent in typed ``contents`` instead of raw bytes (other v2 servers do)."""
    fields = tensor.contents.ListFields()
    if not fields:
        return b""
    if tensor.datatype == "BYTES":
        return serialize_bytes_tensor(list(fields[0][1]))
    dtype = DATATYPES.get(tensor.datatype)
    if dtype is None or tensor.datatype == "BF16":
        raise GatewayError(500, f"output '{tensor.name}': cannot read typed contents")
    return np.asarray(fields[0][1], dtype=dtype).tobytes()
