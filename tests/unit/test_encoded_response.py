"""Small unary responses written straight to wire bytes (grpc_frontend/encoded_response.py)
are, byte for byte, what protobuf's serializer writes for the message the plain path
builds; responses the fast path must not take still get a protobuf message."""

from __future__ import annotations

import numpy as np
import pytest

from inference import grpc_service_pb2 as pb
from service.errors import ResourceExhausted
from service.grpc_frontend.codec import encode_infer_response, encode_unary_infer_response
from service.grpc_frontend.encoded_response import EncodedInferResponse
from service.grpc_frontend.large_messages import serialize_infer_response
from service.types import InferResponse, OutputTensor

_FLOATS = np.arange(16, dtype=np.float32).reshape(1, 16)


def _response(*outputs: OutputTensor, **fields: object) -> InferResponse:
    response = InferResponse("add_sub", "1", "", list(outputs))
    for key, value in fields.items():
        setattr(response, key, value)
    return response


def _out(name: str, array: np.ndarray, datatype: str = "FP32") -> OutputTensor:
    wire = array.tobytes() if datatype != "BYTES" else None
    return OutputTensor(name, datatype, array, wire)


@pytest.mark.parametrize(
    "response",
    [
        _response(_out("OUTPUT0", _FLOATS), _out("OUTPUT1", _FLOATS + 1)),
        _response(_out("OUTPUT0", _FLOATS), id="request-7"),
        _response(_out("OUTPUT0", _FLOATS), id="ünïcode ✓", model_name="mödel"),
        _response(_out("OUTPUT0", _FLOATS), model_version=""),
        _response(_out("SCALAR", np.array(3.0, dtype=np.float64), "FP64")),
        _response(_out("EMPTY", np.zeros((0, 4), dtype=np.float32))),
        _response(_out("WIDE", np.zeros((1, 300, 2), dtype=np.uint8), "UINT8")),
        _response(_out("", np.zeros((2,), dtype=np.int32), "")),
        _response(_out("TEXT", np.array([b"ab", b""], dtype=np.object_), "BYTES")),
        _response(),
        _response(_out("OUTPUT0", _FLOATS), id="x" * 200),
    ],
)
def test_the_bytes_are_protobufs_own(response: InferResponse) -> None:
    encoded = encode_unary_infer_response(response, 2**31 - 1)
    assert type(encoded) is EncodedInferResponse
    message = encode_infer_response(response, 2**31 - 1)
    assert serialize_infer_response(encoded) == message.SerializeToString()
    assert encoded.id == response.id  # reads as the message too
    assert list(encoded.outputs) == list(message.outputs)


def test_a_response_with_parameters_is_a_message() -> None:
    response = _response(_out("OUTPUT0", _FLOATS), parameters={"sequence_id": 3})
    encoded = encode_unary_infer_response(response, 2**31 - 1)
    assert type(encoded) is pb.ModelInferResponse
    assert encoded.parameters["sequence_id"].int64_param == 3


def test_near_the_limit_the_plain_path_keeps_its_checks() -> None:
    response = _response(_out("OUTPUT0", _FLOATS), id="r")
    with pytest.raises(ResourceExhausted, match="more than the server's max message size 100"):
        encode_unary_infer_response(response, 100)
    fits = encode_unary_infer_response(response, 1024)
    assert type(fits) is pb.ModelInferResponse and fits.id == "r"
