"""Triton's generate extension over ModelStreamInfer: flat JSON in, one JSON object per
response out (``/generate`` wants exactly one; ``/generate_stream`` sends each as a
server-sent event, so a decoupled model's responses reach the client as they come).

Request: each key naming a model input becomes that tensor (datatype from the model
metadata; a scalar or a 1-D list, shaped as Triton does: fixed dimensions divide the
element count, the innermost dynamic one takes the rest, other dynamic ones are 1);
every other key is a request parameter. Response: ``model_name``, ``model_version``,
``id`` when set, the response parameters (not the stream's own ``triton_final_response``)
and each output by name, a bare value when it holds one element.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Any

import orjson

from inference import grpc_service_pb2 as pb

from .errors import GatewayError
from .tensors import json_to_raw, raw_to_json
from .v2_json import parameter_value, set_parameter

__all__ = ["FINAL_FLAG", "build_generate_request", "generate_events", "render_generate"]

#: The parameter the service sets on each streamed response of a decoupled model.
FINAL_FLAG = "triton_final_response"


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


def build_generate_request(
    doc: Any, metadata: pb.ModelMetadataResponse, model_name: str, model_version: str
) -> pb.ModelInferRequest:
    """The generate JSON object -> one ModelInferRequest."""
    if not isinstance(doc, dict):
        raise GatewayError(400, "the generate request must be a JSON object")
    inputs = {t.name: t for t in metadata.inputs}
    request = pb.ModelInferRequest(model_name=model_name, model_version=model_version)
    for key, value in doc.items():
        spec = inputs.get(key)
        if spec is None:
            set_parameter(request.parameters[key], value, f"parameter '{key}'")
            continue
        values = value if isinstance(value, list) else [value]
        shape = _shape(list(spec.shape), len(values), key)
        where = f"input '{key}'"
        request.inputs.add(name=key, datatype=spec.datatype, shape=shape)
        request.raw_input_contents.append(json_to_raw(values, spec.datatype, shape, where))
    return request


def render_generate(response: pb.ModelInferResponse) -> dict[str, Any]:
    """One response as Triton's generate JSON object."""
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


async def generate_events(
    responses: AsyncGenerator[pb.ModelStreamInferResponse, None],
) -> AsyncGenerator[bytes, None]:
    """Each response as one ``data: {...}`` event; an error becomes the last event.
    Closing this generator closes ``responses`` (and so cancels the RPC)."""
    try:
        async for item in responses:
            if item.error_message:
                yield _event({"error": item.error_message})
                return
            yield _event(render_generate(item.infer_response))
    except GatewayError as exc:
        yield _event({"error": exc.message})
    finally:
        await responses.aclose()


def _event(doc: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(doc, option=orjson.OPT_SERIALIZE_NUMPY) + b"\n\n"
