"""v2 REST inference JSON <-> ModelInferRequest / ModelInferResponse.

v2 REST JSON is not proto3 JSON (flat typed ``data``, binary parts, JSON parameters), so
this codec is written by hand. Every input travels to the service as
``raw_input_contents`` (JSON data is packed by numpy; binary parts are passed as slices of
the body), and outputs come back as ``raw_output_contents``, written as JSON arrays or
appended as binary parts as the request asked. Unknown fields are refused with a 400.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson

from inference import grpc_service_pb2 as pb

from .binary import BinaryReader
from .errors import GatewayError
from .tensors import DATATYPES, json_to_raw, raw_to_json, serialize_bytes

__all__ = ["InferCall", "decode_infer", "encode_infer", "load_json", "set_parameter"]

_REQUEST_KEYS = frozenset({"id", "parameters", "inputs", "outputs", "model_name", "model_version"})
_INPUT_KEYS = frozenset({"name", "shape", "datatype", "parameters", "data"})
_OUTPUT_KEYS = frozenset({"name", "parameters"})
_INT64 = (-(2**63), 2**63 - 1)
_UINT64_MAX = 2**64 - 1


_SHM_REGION = "shared_memory_region"
_SHM_SIZES = ("shared_memory_offset", "shared_memory_byte_size")


@dataclass(slots=True)
class InferCall:
    """The RPC request, plus how each output goes back (binary part, JSON data, or
    nothing: an output in shared memory is written there by the service)."""

    request: pb.ModelInferRequest
    default_binary: bool = False
    binary: dict[str, bool] = field(default_factory=dict)
    shared_memory: set[str] = field(default_factory=set)

    def output_is_binary(self, name: str) -> bool:
        return self.binary.get(name, self.default_binary)


def load_json(data: bytes | memoryview, what: str) -> Any:
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise GatewayError(400, f"malformed JSON in {what}: {exc}") from None


def _object(value: Any, where: str, allowed: frozenset[str]) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise GatewayError(400, f"{where} must be a JSON object, got {_kind(value)}")
    unknown = sorted(set(value) - allowed)
    if unknown:
        raise GatewayError(
            400, f"unknown field(s) {unknown} in {where}; allowed: {sorted(allowed)}"
        )
    return value


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _string(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise GatewayError(400, f"{where} must be a string, got {_kind(value)}")
    return value


def set_parameter(target: Any, value: Any, where: str) -> None:
    """A JSON scalar into an InferParameter (int64 unless it only fits uint64)."""
    if isinstance(value, bool):
        target.bool_param = value
    elif isinstance(value, int):
        if _INT64[0] <= value <= _INT64[1]:
            target.int64_param = value
        elif 0 <= value <= _UINT64_MAX:
            target.uint64_param = value
        else:
            raise GatewayError(400, f"{where} is out of the 64-bit integer range")
    elif isinstance(value, float):
        target.double_param = value
    elif isinstance(value, str):
        target.string_param = value
    else:
        raise GatewayError(400, f"{where} must be a boolean, number or string, got {_kind(value)}")


def _parameters(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise GatewayError(400, f"'parameters' of {where} must be a JSON object")
    return value


def _flag(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise GatewayError(400, f"Unable to parse '{where}': expected a boolean")
    return value


def decode_infer(
    header: Any, binary: BinaryReader, model_name: str, model_version: str
) -> InferCall:
    """The parsed JSON header (and the body's binary part) -> the RPC request."""
    doc = _object(header, "the inference request", _REQUEST_KEYS)
    for key, bound in (("model_name", model_name), ("model_version", model_version)):
        if key in doc and doc[key] != bound:
            raise GatewayError(400, f"'{key}' {doc[key]!r} in the body differs from the URL's")
    request = pb.ModelInferRequest(model_name=model_name, model_version=model_version)
    call = InferCall(request)
    if "id" in doc:
        request.id = _string(doc["id"], "'id'")
    for key, value in _parameters(doc.get("parameters", {}), "the request").items():
        if key == "binary_data_output":
            call.default_binary = _flag(value, "binary_data_output")
        elif key.startswith("triton_"):
            raise GatewayError(
                400,
                "parameter keys starting with 'triton_' are reserved for Triton usage and "
                "should not be specified.",
            )
        else:
            set_parameter(request.parameters[key], value, f"parameter '{key}'")
    inputs = doc.get("inputs")
    if not isinstance(inputs, list):
        raise GatewayError(400, "Unable to parse 'inputs': expected a JSON array")
    for index, item in enumerate(inputs):
        _decode_input(request, item, index, binary)
    binary.finish()
    outputs = doc.get("outputs", [])
    if not isinstance(outputs, list):
        raise GatewayError(400, "Unable to parse 'outputs': expected a JSON array")
    for index, item in enumerate(outputs):
        _decode_output(call, item, index)
    return call


def _decode_input(
    request: pb.ModelInferRequest, item: Any, index: int, binary: BinaryReader
) -> None:
    spec = _object(item, f"inputs[{index}]", _INPUT_KEYS)
    name = _string(spec.get("name"), f"'name' of inputs[{index}]")
    where = f"input '{name}'"
    datatype = _string(spec.get("datatype"), f"'datatype' of {where}")
    if datatype not in DATATYPES:
        raise GatewayError(
            400, f"{where}: unknown datatype {datatype!r}; expected one of {list(DATATYPES)}"
        )
    shape = spec.get("shape")
    if not isinstance(shape, list) or not all(
        isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape
    ):
        raise GatewayError(400, f"Unable to parse 'shape' of {where}: expected non-negative ints")
    tensor = request.inputs.add(name=name, datatype=datatype, shape=shape)
    params = _parameters(spec.get("parameters", {}), where)
    sources = [k for k in ("binary_data_size", _SHM_REGION) if k in params]
    if "data" in spec:
        sources.insert(0, "data")
    if len(sources) != 1:  # Triton's ValidateInputContentType
        found = " set " + " ".join(f"'{k}'" for k in sources) if sources else " no field is set"
        raise GatewayError(
            400,
            "Input must set only one of the following fields: 'data', 'binary_data_size' in "
            "'parameters', 'shared_memory_region' in 'parameters'. But" + found,
        )
    if sources[0] == _SHM_REGION:
        _check_shared_memory(params)
        # Triton's HTTP frontend reads a missing byte size as 0; the gRPC form needs it.
        params = {"shared_memory_byte_size": 0, **params}
    for key, value in params.items():
        if key != "binary_data_size":
            set_parameter(tensor.parameters[key], value, f"parameter '{key}' of {where}")
    if sources[0] == "data":
        request.raw_input_contents.append(json_to_raw(spec["data"], datatype, shape, where))
    elif sources[0] == "binary_data_size":
        size = params["binary_data_size"]
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise GatewayError(400, f"Unable to parse 'binary_data_size' of {where}")
        request.raw_input_contents.append(binary.take(size, name))
    # a shared-memory input takes no raw_input_contents entry: the service reads the region


def _check_shared_memory(params: dict[str, Any]) -> None:
    """Triton's CheckSharedMemoryData: a string region, unsigned offset and byte size."""
    if not isinstance(params[_SHM_REGION], str):
        raise GatewayError(400, f"Unable to parse '{_SHM_REGION}'")
    for key in _SHM_SIZES:
        value = params.get(key, 0)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise GatewayError(400, f"Unable to parse '{key}'")


def _decode_output(call: InferCall, item: Any, index: int) -> None:
    spec = _object(item, f"outputs[{index}]", _OUTPUT_KEYS)
    name = _string(spec.get("name"), f"'name' of outputs[{index}]")
    tensor = call.request.outputs.add(name=name)
    params = _parameters(spec.get("parameters", {}), f"output '{name}'")
    if _SHM_REGION in params:  # Triton's ValidateOutputParameter
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
    for key, value in params.items():
        if key == "binary_data":
            call.binary[name] = _flag(value, "binary_data")
        else:
            set_parameter(tensor.parameters[key], value, f"parameter '{key}' of output '{name}'")


def parameter_value(param: pb.InferParameter) -> Any:
    which = param.WhichOneof("parameter_choice")
    return None if which is None else getattr(param, which)


def _json_parameters(params: Mapping[str, pb.InferParameter]) -> dict[str, Any]:
    return {key: parameter_value(value) for key, value in params.items()}


def encode_infer(response: pb.ModelInferResponse, call: InferCall) -> tuple[bytes, list[bytes]]:
    """(JSON header, binary parts in output order) for a ModelInferResponse."""
    doc: dict[str, Any] = {}
    if response.id:
        doc["id"] = response.id
    doc["model_name"] = response.model_name
    doc["model_version"] = response.model_version
    if response.parameters:
        doc["parameters"] = _json_parameters(response.parameters)
    raw = response.raw_output_contents
    parts: list[bytes] = []
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
        return serialize_bytes(list(fields[0][1]))
    dtype = DATATYPES.get(tensor.datatype)
    if dtype is None or tensor.datatype == "BF16":
        raise GatewayError(500, f"output '{tensor.name}': cannot read typed contents")
    return np.asarray(fields[0][1], dtype=dtype).tobytes()
