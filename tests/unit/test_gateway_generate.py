"""The generate extension's mapping (gateway/generate.py)."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Any

import numpy as np
import pytest

from gateway.errors import GatewayError
from gateway.generate import (
    FINAL_FLAG,
    build_generate_request,
    generate_events,
    render_generate,
)
from gateway.tensors import serialize_bytes
from inference import grpc_service_pb2 as pb


def _metadata(*inputs: tuple[str, str, list[int]]) -> pb.ModelMetadataResponse:
    meta = pb.ModelMetadataResponse(name="m")
    for name, datatype, shape in inputs:
        meta.inputs.add(name=name, datatype=datatype, shape=shape)
    return meta


@pytest.mark.parametrize(
    ("dims", "values", "shape"),
    [
        ([-1], [1, 2, 3], [3]),
        ([-1, -1], [1, 2, 3], [1, 3]),  # innermost dynamic dim takes the count
        ([-1, 4], [1, 2, 3, 4, 5, 6, 7, 8], [2, 4]),
        ([2, -1], [1, 2, 3, 4], [2, 2]),
        ([1], 7, [1]),  # a bare value is one element
        ([-1, 1], 7, [1, 1]),
    ],
)
def test_shapes_as_triton_deduces_them(dims: list[int], values: Any, shape: list[int]) -> None:
    request = build_generate_request({"X": values}, _metadata(("X", "INT32", dims)), "m", "")
    assert list(request.inputs[0].shape) == shape
    flat = values if isinstance(values, list) else [values]
    assert request.raw_input_contents[0] == np.array(flat, "<i4").tobytes()


@pytest.mark.parametrize(("dims", "values"), [([4], [1, 2, 3]), ([-1, 3], [1, 2]), ([0], [1])])
def test_unshapeable_values_are_400(dims: list[int], values: list[int]) -> None:
    with pytest.raises(GatewayError, match="proper shape") as info:
        build_generate_request({"X": values}, _metadata(("X", "INT32", dims)), "m", "")
    assert info.value.status == 400


def test_other_keys_are_parameters() -> None:
    meta = _metadata(("text_input", "BYTES", [1]))
    request = build_generate_request(
        {"text_input": "hi", "max_tokens": 5, "stream": True, "temperature": 0.5},
        meta,
        "m",
        "2",
    )
    assert request.model_version == "2"
    assert request.raw_input_contents[0] == serialize_bytes([b"hi"])
    assert request.parameters["max_tokens"].int64_param == 5
    assert request.parameters["stream"].bool_param is True
    assert request.parameters["temperature"].double_param == 0.5
    with pytest.raises(GatewayError, match="JSON object"):
        build_generate_request([1], meta, "m", "")
    with pytest.raises(GatewayError, match="parameter 'x'"):
        build_generate_request({"x": {"a": 1}}, meta, "m", "")


def _response(final: bool | None = None) -> pb.ModelInferResponse:
    response = pb.ModelInferResponse(model_name="m", model_version="1", id="r")
    response.outputs.add(name="text_output", datatype="BYTES", shape=[1])
    response.raw_output_contents.append(serialize_bytes([b"hello"]))
    response.outputs.add(name="scores", datatype="FP32", shape=[2])
    response.raw_output_contents.append(np.array([0.5, 1.5], np.float32).tobytes())
    if final is not None:
        response.parameters[FINAL_FLAG].bool_param = final
    response.parameters["tokens"].int64_param = 3
    return response


def test_render_generate() -> None:
    doc = render_generate(_response(final=True))
    assert doc["text_output"] == "hello"
    assert doc["scores"].tolist() == [0.5, 1.5]
    assert {k: doc[k] for k in ("id", "model_name", "model_version", "tokens")} == {
        "id": "r",
        "model_name": "m",
        "model_version": "1",
        "tokens": 3,
    }
    assert FINAL_FLAG not in doc


async def _stream(*items: pb.ModelStreamInferResponse) -> AsyncGenerator[Any, None]:
    for item in items:
        yield item


async def test_events_one_per_response_then_error() -> None:
    items = (
        pb.ModelStreamInferResponse(infer_response=_response(False)),
        pb.ModelStreamInferResponse(infer_response=_response(True)),
        pb.ModelStreamInferResponse(error_message="boom"),
        pb.ModelStreamInferResponse(infer_response=_response(True)),
    )
    events = [e async for e in generate_events(_stream(*items))]
    assert len(events) == 3  # nothing after the error
    assert all(e.startswith(b"data: {") and e.endswith(b"}\n\n") for e in events)
    assert events[2] == b'data: {"error":"boom"}\n\n'


async def test_events_turn_a_failed_rpc_into_a_last_event() -> None:
    async def failing() -> AsyncGenerator[Any, None]:
        yield pb.ModelStreamInferResponse(infer_response=_response(False))
        raise GatewayError(503, "service went away")

    events = [e async for e in generate_events(failing())]
    assert events[-1] == b'data: {"error":"service went away"}\n\n'
