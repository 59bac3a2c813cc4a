"""The generate extension: Triton's conversion and texts (gateway/generate.py) and its
answers from the stream's responses (gateway/generate_stream.py), with a fake stub."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import grpc
import numpy as np
import orjson
import pytest

from gateway.errors import GatewayError
from gateway.generate import (
    FINAL_FLAG,
    build_generate_request,
    load_generate_json,
    render_generate,
)
from gateway.generate_stream import ERROR_CODE_PARAMETER, ERROR_CODES_METADATA, GenerateCall
from inference import grpc_service_pb2 as pb
from wire.datatypes import serialize_bytes_tensor as serialize_bytes


def _metadata(*inputs: tuple[str, str, list[int]]) -> pb.ModelMetadataResponse:
    meta = pb.ModelMetadataResponse(name="m")
    for name, datatype, shape in inputs:
        meta.inputs.add(name=name, datatype=datatype, shape=shape)
    return meta


LLM = _metadata(("PROMPT", "BYTES", [1, 1]), ("STREAM", "BOOL", [1, 1]), ("ids", "INT32", [1, -1]))


def build(body: str | bytes, meta: pb.ModelMetadataResponse = LLM) -> pb.ModelInferRequest:
    raw = body.encode() if isinstance(body, str) else body
    return build_generate_request(load_generate_json(raw), meta, "m", "")


def refused(body: str, meta: pb.ModelMetadataResponse = LLM) -> str:
    with pytest.raises(GatewayError) as info:
        build(body, meta)
    assert info.value.status == 400
    return info.value.message


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
    request = build(orjson.dumps({"X": values}), _metadata(("X", "INT32", dims)))
    assert list(request.inputs[0].shape) == shape
    flat = values if isinstance(values, list) else [values]
    assert request.raw_input_contents[0] == np.array(flat, "<i4").tobytes()


@pytest.mark.parametrize(("dims", "values"), [([4], [1, 2, 3]), ([-1, 3], [1, 2]), ([0], [1])])
def test_unshapeable_values(dims: list[int], values: list[int]) -> None:
    message = refused(orjson.dumps({"X": values}).decode(), _metadata(("X", "INT32", dims)))
    assert message == "The schema can not convert input 'X' to tensor with proper shape"


def test_other_keys_are_parameters_of_triton_types() -> None:
    request = build(
        '{"PROMPT": "hi", "STREAM": true, "max_tokens": 5, "stream": true, '
        '"temperature": 0.5, "big": 18446744073709551615, "name": "x"}'
    )
    assert request.raw_input_contents[0] == serialize_bytes([b"hi"])
    assert request.raw_input_contents[1] == b"\x01"
    params = request.parameters
    assert params["max_tokens"].int64_param == 5
    assert params["stream"].bool_param is True
    assert params["temperature"].double_param == 0.5
    assert params["big"].double_param == 2.0**64  # beyond int64: a number, as in Triton
    assert params["name"].string_param == "x"


def test_id_is_the_request_id_and_a_parameter() -> None:
    request = build('{"PROMPT": "hi", "STREAM": false, "id": "42"}')
    assert request.id == "42"
    assert request.parameters["id"].string_param == "42"
    assert (
        refused('{"id": 1}') == "Unable to parse 'id': attempt to access JSON non-string as string"
    )


def test_nested_parameters_are_merged() -> None:
    request = build('{"PROMPT": ["hi"], "STREAM": true, "parameters": {"REPETITION": 3}}')
    assert request.parameters["REPETITION"].int64_param == 3
    assert "parameters" not in request.parameters
    # A key of the nested object that names an input is that input (Triton's schema).
    request = build('{"PROMPT": "hi", "parameters": {"STREAM": false}}')
    assert [t.name for t in request.inputs] == ["PROMPT", "STREAM"]
    assert refused('{"parameters": 1}') == (
        "Expected JSON object for keyword: 'parameters': "
        "attempt to access JSON non-object as object"
    )
    assert refused('{"parameters": {"nested": {"twice": 1}}}') == (
        "Converting keyword: 'parameters': parameter 'nested' has invalid type. "
        "It should be either 'int', 'bool', or 'string'."
    )


def test_repeated_inputs_are_refused_in_document_order() -> None:
    message = "input 'PROMPT' already exists in request"
    assert refused('{"PROMPT": "a", "STREAM": false, "PROMPT": "b"}').endswith(message)
    assert refused('{"PROMPT": "a", "STREAM": false, "STREAM": true, "PROMPT": "b"}').endswith(
        "input 'STREAM' already exists in request"
    )
    assert refused('{"id": "7", "PROMPT": "a", "PROMPT": "b"}') == f"[request id: 7] {message}"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ('{"PROMPT": 123}', "Unable to parse JSON bytes array: attempt to access JSON non-string"),
        ('{"PROMPT": "x", "STREAM": "false"}', "attempt to access JSON non-boolean as boolean"),
        ('{"PROMPT": true, "STREAM": 123}', "non-string as string"),
        ('{"STREAM": 123, "PROMPT": true}', "non-boolean as boolean"),
        ('{"ids": [1, 2.5]}', "attempt to access JSON non-signed-integer as signed-integer"),
        ('{"ids": [[1, 2], [3]]}', "Shape does not match true shape of 'data' field"),
        ('{"PROMPT": {"USER": "x"}}', "attempt to access JSON non-string as string"),
        ('{"PARAMS": {"a": 0}}', "parameter 'PARAMS' has invalid type"),
        ('{"p": null}', "parameter 'p' has invalid type"),
        ("", "failed to parse the request JSON buffer: The document is empty. at 0"),
        ('{"PROMPT": ', "failed to parse the request JSON buffer: "),
        ("[1]", "attempt to get members for non-object"),
    ],
)
def test_triton_texts_for_bad_values(body: str, message: str) -> None:
    assert message in refused(body)


def test_fp16_is_refused_in_json_as_triton_does() -> None:
    message = refused('{"h": [1.0]}', _metadata(("h", "FP16", [-1])))
    assert message == (
        "receiving FP16 data via JSON is not supported. Please use the binary data format "
        "for input h"
    )


def _response(final: bool | None = None) -> pb.ModelInferResponse:
    response = pb.ModelInferResponse(model_name="m", model_version="1", id="r")
    response.outputs.add(name="text_output", datatype="BYTES", shape=[1])
    response.raw_output_contents.append(serialize_bytes([b"hello"]))
    response.outputs.add(name="scores", datatype="FP32", shape=[2])
    response.raw_output_contents.append(np.array([0.5, 1.5], np.float32).tobytes())
    response.outputs.add(name="empty", datatype="FP64", shape=[0])
    response.raw_output_contents.append(b"")
    if final is not None:
        response.parameters[FINAL_FLAG].bool_param = final
    response.parameters["tokens"].int64_param = 3
    return response


def test_render_generate() -> None:
    doc = render_generate(_response(final=True))
    assert doc["text_output"] == "hello"  # one element: a bare value
    assert doc["scores"].tolist() == [0.5, 1.5]
    assert doc["empty"].tolist() == []  # a 0-dimension output
    assert {k: doc[k] for k in ("id", "model_name", "model_version", "tokens")} == {
        "id": "r",
        "model_name": "m",
        "model_version": "1",
        "tokens": 3,
    }
    assert FINAL_FLAG not in doc


# --- answers from the stream's responses ---------------------------------------------------


def _error(message: str, code: str | None) -> pb.ModelStreamInferResponse:
    reply = pb.ModelStreamInferResponse(error_message=message)
    if code is not None:
        reply.infer_response.parameters[ERROR_CODE_PARAMETER].string_param = code
    return reply


def _ok(final: bool = False) -> pb.ModelStreamInferResponse:
    return pb.ModelStreamInferResponse(infer_response=_response(final))


class _Call:
    """What a sync stream call is to the gateway: an iterator that can be cancelled."""

    def __init__(self, items: list[Any]) -> None:
        self._items = items
        self.cancelled = False

    def __iter__(self) -> Iterator[Any]:
        for item in self._items:
            if isinstance(item, Exception):
                raise item
            yield item

    def cancel(self) -> None:
        self.cancelled = True


class _Stub:
    def __init__(self, *items: Any) -> None:
        self.call = _Call(list(items))
        self.metadata: Any = None

    def ModelStreamInfer(self, requests: Any, metadata: Any = None) -> _Call:
        self.metadata = metadata
        return self.call


def _generate(stub: _Stub) -> GenerateCall:
    return GenerateCall(stub, pb.ModelInferRequest(model_name="m"), (("k", "v"),), "svc")  # type: ignore[arg-type]


def test_generate_asks_for_error_codes_and_answers_one_response() -> None:
    stub = _Stub(_ok(True))
    response = _generate(stub).collect(None)
    assert stub.metadata == (("k", "v"), ERROR_CODES_METADATA)
    assert response.status == 200
    assert orjson.loads(response.body)["text_output"] == "hello"
    assert stub.call.cancelled


@pytest.mark.parametrize(
    ("items", "status", "error"),
    [
        ([], 200, "exactly 1 response"),  # the status comes from the first response
        ([_ok(), _ok(True)], 200, "exactly 1 response"),
        ([_error("An Error Occurred", "INTERNAL")], 500, "An Error Occurred"),
        ([_error("expected 2 inputs", "INVALID_ARGUMENT")], 400, "expected 2 inputs"),
        ([_error("queue full", "UNAVAILABLE")], 503, "queue full"),
        ([_error("no code", None)], 500, "no code"),
    ],
)
def test_generate_status_and_errors(items: list[Any], status: int, error: str) -> None:
    response = _generate(_Stub(*items)).collect(None)
    assert response.status == status
    assert error in orjson.loads(response.body)["error"]


def test_generate_stream_sends_each_response_and_model_errors_as_events() -> None:
    stub = _Stub(_ok(), _ok(), _error("An Error Occurred", "INTERNAL"))
    response = _generate(stub).stream()
    assert response.status == 200 and response.stream is not None
    assert response.headers == [(b"content-type", b"text/event-stream; charset=utf-8")]
    events = list(response.stream)
    assert len(events) == 3
    assert all(e.startswith(b"data: {") and e.endswith(b"}\n\n") for e in events)
    assert events[2] == b'data: {"error":"An Error Occurred"}\n\n'
    assert stub.call.cancelled


def test_generate_stream_first_error_sets_the_status() -> None:
    response = _generate(_Stub(_error("An Error Occurred", "INTERNAL"))).stream()
    assert response.status == 500 and response.stream is not None
    assert list(response.stream) == [b'data: {"error":"An Error Occurred"}\n\n']


def test_generate_stream_refusal_is_a_json_error() -> None:
    stub = _Stub(_error("expected number of inputs between 2 and 3", "INVALID_ARGUMENT"))
    with pytest.raises(GatewayError) as info:
        _generate(stub).stream()
    assert (info.value.status, info.value.message) == (
        400,
        "expected number of inputs between 2 and 3",
    )
    assert stub.call.cancelled


class _RpcFailure(grpc.RpcError):
    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.UNAVAILABLE

    def details(self) -> str:
        return "connection refused"


def test_a_failed_rpc_mid_stream_is_a_last_event() -> None:
    response = _generate(_Stub(_ok(), _RpcFailure())).stream()
    assert response.stream is not None
    events = list(response.stream)
    assert events[-1].startswith(b'data: {"error":"inference service at svc is unavailable')


def test_closing_the_stream_cancels_the_rpc() -> None:
    stub = _Stub(_ok(), _ok(), _ok())
    response = _generate(stub).stream()
    assert response.stream is not None
    next(response.stream)
    response.stream.close()
    assert stub.call.cancelled
