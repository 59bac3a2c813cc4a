"""The raw tensor fields of ModelInfer messages on the wire (protos/wire/raw_fields.py), the
gateway's messages built on them (gateway/raw_messages.py) and the scatter send that carries
them (gateway/sockets.send_parts): the same bytes as protobuf's, whatever the socket takes
per call."""

from __future__ import annotations

import socket
import threading

import pytest

from gateway.raw_messages import RawInferRequest, split_response
from gateway.sockets import send_parts
from inference import grpc_service_pb2 as pb
from wire import raw_fields


def _request() -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name="m", id="7")
    request.parameters["sequence_id"].int64_param = -1  # a 10-byte varint
    for i, size in enumerate((3, 200, 70_000)):
        request.inputs.add(name=f"IN{i}", datatype="UINT8", shape=[size])
    return request


def test_a_raw_request_is_protobufs_message_on_the_wire() -> None:
    raws = [b"abc", bytes(range(200)), memoryview(bytes(70_000))[:]]
    message = _request()
    whole = pb.ModelInferRequest()
    whole.CopyFrom(message)
    whole.raw_input_contents.extend(bytes(r) for r in raws)
    raw = RawInferRequest(message, raws)
    assert pb.ModelInferRequest.FromString(raw.SerializeToString()) == whole
    assert raw.whole() == whole
    assert len(raw.SerializeToString()) == whole.ByteSize()


def test_split_finds_the_raw_entries_anywhere_and_keeps_the_rest() -> None:
    response = pb.ModelInferResponse(model_name="m", id="x")
    response.outputs.add(name="OUT", datatype="UINT8", shape=[300_000])
    response.raw_output_contents.append(b"\x01" * 300_000)
    data = response.SerializeToString() + b"\x0a\x01n"  # a model_name after the raw field
    split = split_response(memoryview(data))
    assert split is not None
    assert split.model_name == "n"  # the last value of a singular field wins, as protobuf's
    assert type(split.raw_output_contents[0]) is memoryview
    assert bytes(split.raw_output_contents[0]) == b"\x01" * 300_000
    assert split.outputs[0].name == "OUT"


def test_a_split_answer_is_the_same_message_again() -> None:
    """The request's split type serves answers too: field 6 reads as the views, size and
    bytes are protobuf's."""
    response = pb.ModelInferResponse(model_name="m", id="x")
    response.outputs.add(name="OUT", datatype="UINT8", shape=[300_000])
    response.raw_output_contents.append(b"\x02" * 300_000)
    split = split_response(memoryview(response.SerializeToString()))
    assert split is not None
    assert not split.message.raw_output_contents  # protobuf never held the tensor bytes
    assert split.ByteSize() == response.ByteSize()
    assert pb.ModelInferResponse.FromString(split.SerializeToString()) == response


@pytest.mark.parametrize("cut", [1, 2, 100])
def test_a_truncated_message_does_not_walk(cut: int) -> None:
    data = RawInferRequest(_request(), [b"abc", bytes(200), bytes(70_000)]).SerializeToString()
    assert raw_fields.split(data[:-cut], raw_fields.RAW_INPUT_FIELD) is None


def test_varints_round_trip() -> None:
    for value in (0, 1, 127, 128, 300, 1 << 35):
        encoded = raw_fields.varint(value)
        assert raw_fields._read_varint(encoded, 0, len(encoded)) == (value, len(encoded))


def test_send_parts_resumes_where_a_full_socket_buffer_stopped_it() -> None:
    """A small send buffer makes every sendmsg partial; the reader gets every byte in
    order, the parts as given (bytes, memoryview slices)."""
    left, right = socket.socketpair()
    left.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    parts = [b"head", memoryview(bytes(range(256)) * 4000)[5:], b"", b"tail" * 1000]
    expected = b"".join(bytes(p) for p in parts)
    received = bytearray()

    def read() -> None:
        while len(received) < len(expected):
            chunk = right.recv(65536)
            if not chunk:
                break
            received.extend(chunk)

    reader = threading.Thread(target=read)
    reader.start()
    try:
        send_parts(left, parts)
    finally:
        reader.join(timeout=30)
        left.close()
        right.close()
    assert bytes(received) == expected
