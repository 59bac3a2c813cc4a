"""Large ModelInfer messages split on the wire (service/grpc_frontend/large_messages.py):
the same messages as protobuf's parse and serialization, with the tensor bytes as views
of what grpc handed over; malformed bytes fall back to protobuf's refusal."""

from __future__ import annotations

import numpy as np
import pytest

from inference import grpc_service_pb2 as pb
from service.grpc_frontend.codec import (
    decode_infer_request,
    encode_infer_response,
    encode_unary_infer_response,
)
from service.grpc_frontend.large_messages import (
    SPLIT_MIN_BYTES,
    WireInferResponse,
    request_parser,
    serialize_infer_response,
    split_infer_request,
)
from service.grpc_frontend.registration import Malformed, parser
from service.types import InferResponse, OutputTensor
from wire.raw_fields import SplitMessage

BIG = SPLIT_MIN_BYTES  # bytes per tensor: the message is over the split size


def _request(size: int = BIG) -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name="identity", model_version="1", id="r-7")
    request.parameters["priority"].uint64_param = 3
    request.parameters["tag"].string_param = "x" * 200
    for i in range(2):
        tensor = request.inputs.add(name=f"INPUT{i}", datatype="UINT8", shape=[1, size])
        tensor.parameters["p"].int64_param = -5  # negative: a 10-byte varint
        request.raw_input_contents.append(bytes([i + 1]) * size)
    request.outputs.add(name="OUTPUT0")
    return request


def test_a_split_request_reads_as_protobuf_parsed_it() -> None:
    original = _request()
    data = original.SerializeToString()
    split = split_infer_request(data)
    assert isinstance(split, SplitMessage)
    assert all(type(r) is memoryview for r in split.raw_input_contents)
    assert [bytes(r) for r in split.raw_input_contents] == list(original.raw_input_contents)
    assert split.model_name == "identity" and split.id == "r-7"
    assert split.parameters["priority"].uint64_param == 3
    assert [t.name for t in split.inputs] == ["INPUT0", "INPUT1"]
    assert split.ByteSize() == original.ByteSize()
    assert pb.ModelInferRequest.FromString(split.SerializeToString()) == original


def test_the_core_request_holds_views_of_the_received_bytes() -> None:
    data = _request().SerializeToString()
    split = split_infer_request(data)
    assert split is not None
    decoded = decode_infer_request(split)  # type: ignore[arg-type]
    raw = decoded.inputs[1].raw
    assert isinstance(raw, memoryview) and raw.obj is data  # no copy
    assert np.frombuffer(raw, np.uint8)[0] == 2


@pytest.mark.parametrize("cut", [1, 5, 40, BIG // 2])
def test_truncated_bytes_are_left_to_protobuf(cut: int) -> None:
    """A message cut short does not walk; the registered parser then refuses it with the
    text every malformed request gets."""
    data = _request().SerializeToString()
    assert split_infer_request(data[:-cut]) is None
    parsed = request_parser(parser(pb.ModelInferRequest))(data[:-cut])
    assert isinstance(parsed, Malformed)
    assert "not a valid inference.ModelInferRequest message" in parsed.message


def test_garbage_after_a_valid_head_is_refused() -> None:
    data = _request().SerializeToString() + b"\xff\xff\xff"
    assert isinstance(request_parser(parser(pb.ModelInferRequest))(data), Malformed)


def test_small_requests_keep_protobufs_parse() -> None:
    data = _request(size=16).SerializeToString()
    parsed = request_parser(parser(pb.ModelInferRequest))(data)
    assert type(parsed) is pb.ModelInferRequest


def _response(size: int) -> InferResponse:
    arrays = [np.full((1, size), 7, np.uint8), np.arange(4, dtype=np.float32)]
    outputs = [
        OutputTensor(f"OUTPUT{i}", dt, a, None)
        for i, (dt, a) in enumerate(zip(["UINT8", "FP32"], arrays, strict=True))
    ]
    return InferResponse("identity", "1", "r-7", outputs, {"sequence_end": True})


def test_a_large_unary_response_is_the_same_message_on_the_wire() -> None:
    response = _response(BIG)
    wire = encode_unary_infer_response(response, 1 << 31)
    assert type(wire) is WireInferResponse
    expected = encode_infer_response(_response(BIG), 1 << 31)
    data = serialize_infer_response(wire)
    assert pb.ModelInferResponse.FromString(data) == expected
    assert len(data) == expected.ByteSize()
    assert wire.model_name == "identity"  # any attribute reads the whole message
    assert list(wire.raw_output_contents) == list(expected.raw_output_contents)


def test_a_small_unary_response_stays_a_protobuf_message() -> None:
    message = encode_unary_infer_response(_response(16), 1 << 31)
    assert type(message) is pb.ModelInferResponse
    assert serialize_infer_response(message) == message.SerializeToString()


def test_a_large_response_over_the_limit_names_the_model() -> None:
    with pytest.raises(Exception, match="response for model 'identity' is"):
        encode_unary_infer_response(_response(BIG), BIG + 10)
