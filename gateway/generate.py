"""Triton's generate extension: a flat JSON object in, one JSON object per response out.

Request, as Triton's frontend converts it (``HandleGenerate``): the keys in document
order, a repeated key included (rapidjson keeps both, and the second time a model input
is added Triton refuses it; each occurrence reads the key's first value, as ``Find``
does). A key naming a model input becomes that tensor (datatype from the model metadata;
a scalar or an array, shaped in two passes: fixed dimensions divide the element count,
the innermost dynamic one takes the rest, other dynamic ones are 1). ``parameters`` is a
nested object whose keys are converted the same way. Every other key is a request
parameter (string, integer, boolean or number). ``id`` is the request id and, as in
Triton, also a parameter. Error texts are Triton's.

Response: ``id`` when set, ``model_name``, ``model_version``, the response parameters
(not the stream's own ``triton_final_response``) and each output by name, a bare value
when it holds one element; keys sorted, as Triton's ``std::map`` orders them.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import orjson

from inference import grpc_service_pb2 as pb
from wire.datatypes import serialize_bytes_tensor

from .errors import GatewayError
from .tensors import DATATYPES, raw_to_json
from .v2_json import parameter_value

__all__ = [
    "FINAL_FLAG",
    "JsonObject",
    "build_generate_request",
    "dumps",
    "event",
    "load_generate_json",
    "render_generate",
]

#: The parameter the service sets on each streamed response of a decoupled model.
FINAL_FLAG = "triton_final_response"

_INT64 = (-(2**63), 2**63 - 1)
_UINT64_MAX = 2**64 - 1
_NOT_STRING = "attempt to access JSON non-string as string"
#: datatype kind -> (accepts a JSON value?, Triton's text when it does not)
_ELEMENT_RULES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "BOOL": (lambda v: isinstance(v, bool), "attempt to access JSON non-boolean as boolean"),
    "INT": (
        lambda v: type(v) is int and _INT64[0] <= v <= _INT64[1],
        "attempt to access JSON non-signed-integer as signed-integer",
    ),
    "UINT": (
        lambda v: type(v) is int and 0 <= v <= _UINT64_MAX,
        "attempt to access JSON non-unsigned-integer as unsigned-integer",
    ),
    "FP": (lambda v: type(v) in (int, float), "attempt to access JSON non-number as double"),
}


class JsonObject(list[tuple[str, Any]]):
    """A JSON object as its (key, value) pairs in document order, repeated keys kept."""

    def first(self, key: str) -> Any:
        return next(value for name, value in self if name == key)


def load_generate_json(body: bytes | bytearray) -> Any:
    """The body as JSON (objects as ``JsonObject``); Triton's text when it is not JSON."""
    try:
        return json.loads(body, object_pairs_hook=JsonObject)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        where = exc.pos if isinstance(exc, json.JSONDecodeError) else exc.start
        reason = exc.msg if isinstance(exc, json.JSONDecodeError) else "Invalid encoding"
        if not body.strip():
            reason = "The document is empty."
        raise GatewayError(
            400, f"failed to parse the request JSON buffer: {reason} at {where}"
        ) from None


def build_generate_request(
    doc: Any, metadata: pb.ModelMetadataResponse, model_name: str, model_version: str
) -> pb.ModelInferRequest:
    """The generate JSON object -> one ModelInferRequest."""
    if not isinstance(doc, JsonObject):
        raise GatewayError(400, "attempt to get members for non-object")
    request = pb.ModelInferRequest(model_name=model_name, model_version=model_version)
    if any(key == "id" for key, _ in doc):
        request_id = doc.first("id")
        if not isinstance(request_id, str):
            raise GatewayError(400, f"Unable to parse 'id': {_NOT_STRING}")
        request.id = request_id
    _convert(doc, {t.name: t for t in metadata.inputs}, request, top=True)
    return request


def _convert(
    doc: JsonObject,
    inputs: dict[str, pb.ModelMetadataResponse.TensorMetadata],
    request: pb.ModelInferRequest,
    *,
    top: bool,
) -> None:
    for key, _ in doc:
        value = doc.first(key)
        if top and key == "parameters":
            if key in inputs:
                raise GatewayError(
                    400, "Keyword 'parameters' for nested schema also given as input tensor name"
                )
            if not isinstance(value, JsonObject):
                raise GatewayError(
                    400,
                    "Expected JSON object for keyword: 'parameters': "
                    "attempt to access JSON non-object as object",
                )
            try:
                _convert(value, inputs, request, top=False)
            except GatewayError as exc:
                raise GatewayError(
                    exc.status, f"Converting keyword: 'parameters': {exc.message}"
                ) from None
        elif key in inputs:
            _add_input(request, key, value, inputs[key])
        else:
            _set_parameter(request, key, value)


def _set_parameter(request: pb.ModelInferRequest, key: str, value: Any) -> None:
    """Triton's order: string, 64-bit integer, boolean, any other number."""
    target = request.parameters[key]
    if isinstance(value, str):
        target.string_param = value
    elif type(value) is int and _INT64[0] <= value <= _INT64[1]:
        target.int64_param = value
    elif isinstance(value, bool):
        target.bool_param = value
    elif type(value) in (int, float):
        target.double_param = float(value)
    else:
        del request.parameters[key]
        raise GatewayError(
            400,
            f"parameter '{key}' has invalid type. It should be either 'int', 'bool', or 'string'.",
        )


def _add_input(
    request: pb.ModelInferRequest,
    name: str,
    value: Any,
    spec: pb.ModelMetadataResponse.TensorMetadata,
) -> None:
    datatype = spec.datatype
    count = len(value) if isinstance(value, list) else 1
    leaves = list(_leaves(value))
    if datatype == "BYTES":
        for leaf in leaves:
            if not isinstance(leaf, str):
                raise GatewayError(400, f"Unable to parse JSON bytes array: {_NOT_STRING}")
    shape = _shape(list(spec.shape), count, name)
    raw = _raw(name, datatype, leaves, count)
    if any(tensor.name == name for tensor in request.inputs):
        prefix = f"[request id: {request.id or '<id_unknown>'}] "
        raise GatewayError(400, f"{prefix}input '{name}' already exists in request")
    request.inputs.add(name=name, datatype=datatype, shape=shape)
    request.raw_input_contents.append(raw)


def _leaves(value: Any) -> Iterator[Any]:
    if isinstance(value, list):
        for item in value:
            yield from _leaves(item)
    else:
        yield value


def _shape(dims: list[int], count: int, name: str) -> list[int]:
    """Triton's two passes: fixed dimensions divide the count, the innermost dynamic one
    takes what remains, the other dynamic ones are 1."""
    shape = list(dims)
    for dim in reversed(shape):
        if dim >= 0:
            if dim == 0 or count % dim:
                raise _unshapeable(name)
            count //= dim
    for index in range(len(shape) - 1, -1, -1):
        if shape[index] < 0:
            shape[index], count = count, 1
    if count != 1:
        raise _unshapeable(name)
    return shape


def _unshapeable(name: str) -> GatewayError:
    return GatewayError(
        400, f"The schema can not convert input '{name}' to tensor with proper shape"
    )


def _raw(name: str, datatype: str, leaves: list[Any], count: int) -> bytes:
    """Triton's ReadDataFromJson: each element checked against the datatype, and as many
    elements as the value's top-level length."""
    if datatype in ("FP16", "BF16"):
        raise GatewayError(
            400,
            f"receiving {datatype} data via JSON is not supported. Please use the binary "
            f"data format for input {name}",
        )
    if datatype not in DATATYPES:
        raise GatewayError(400, f"invalid datatype for input {name}")
    if datatype == "BYTES":
        return serialize_bytes_tensor([leaf.encode("utf-8") for leaf in leaves])
    kind = datatype.rstrip("0123456789")
    accepts, message = _ELEMENT_RULES[kind]
    for leaf in leaves[:count]:
        if not accepts(leaf):
            raise GatewayError(400, f"Unable to parse 'data': {message}")
    if len(leaves) != count:
        raise GatewayError(
            400, "Unable to parse 'data': Shape does not match true shape of 'data' field"
        )
    wide = {"BOOL": np.bool_, "INT": np.int64, "UINT": np.uint64, "FP": np.float64}[kind]
    with np.errstate(over="ignore", invalid="ignore"):  # C casts, as Triton narrows
        return np.asarray(leaves, dtype=wide).astype(DATATYPES[datatype]).tobytes()


def render_generate(response: pb.ModelInferResponse) -> dict[str, Any]:
    """One response as Triton's generate JSON object (write it with OPT_SORT_KEYS)."""
    doc: dict[str, Any] = {}
    if response.id:
        doc["id"] = response.id
    doc["model_name"] = response.model_name
    doc["model_version"] = response.model_version
    for key, param in response.parameters.items():
        if key != FINAL_FLAG:
            doc[key] = parameter_value(param)
    raw = response.raw_output_contents
    for index, tensor in enumerate(response.outputs):
        data = raw[index] if index < len(raw) else b""
        value = raw_to_json(data, tensor.datatype, tensor.shape, f"output '{tensor.name}'")
        doc[tensor.name] = value[0] if len(value) == 1 else value
    return doc


def dumps(doc: dict[str, Any]) -> bytes:
    return orjson.dumps(doc, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_SORT_KEYS)


def event(doc: dict[str, Any]) -> bytes:
    """One server-sent event."""
    return b"data: " + dumps(doc) + b"\n\n"
