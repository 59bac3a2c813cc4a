"""Large ModelInfer messages without protobuf's copies of their tensor bytes.

A parsed ``ModelInferRequest`` holds its ``raw_input_contents`` as protobuf's own copy of
the message bytes, and each read of an entry copies it again into a Python ``bytes``;
a ``ModelInferResponse`` copies each output into the message and once more into the
serialized bytes. Below a few KiB that is nothing, but at 64 MiB each copy is tens of
milliseconds of page faults and memory traffic in the frontend (loadtest cost-budget).
So a large request is split on the wire: its raw entries (field 7) become memoryviews
of the bytes grpc handed over, and only the rest, small, is parsed by protobuf; a large
unary response is written as the serialized message without its raw entries, followed
by each entry's tag, length and bytes (field 6), in one join. Protobuf allows a
repeated field's entries anywhere in the message, so both are the same message on the
wire; clients parse them as any other.

Small messages keep protobuf's path (the split would cost more than it saves).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from google.protobuf.message import Message

from inference import grpc_service_pb2 as pb
from wire import raw_fields
from wire.raw_fields import SplitMessage

from .encoded_response import EncodedInferResponse

__all__ = [
    "SPLIT_MIN_BYTES",
    "WireInferResponse",
    "serialize_infer_response",
    "serialized_parts",
    "split_infer_request",
]

#: Messages (requests) or raw outputs (responses) at least this large take the split path.
SPLIT_MIN_BYTES = 256 << 10


def split_infer_request(data: bytes) -> SplitMessage[pb.ModelInferRequest] | None:
    """``data`` as a request whose ``raw_input_contents`` are views of it; None where it
    does not walk as a well-formed message (protobuf's own parse then gives the refusal)."""
    return raw_fields.split_message(data, pb.ModelInferRequest, raw_fields.RAW_INPUT_FIELD)


def request_parser(
    parse: Callable[[bytes], Any],
) -> Callable[[bytes], Any]:
    """``parse`` (the registered, never-raising parser) with the split for large bytes."""

    def deserialize(data: bytes) -> Any:
        if len(data) >= SPLIT_MIN_BYTES:
            split = split_infer_request(data)
            if split is not None:
                return split
        return parse(data)

    return deserialize


class WireInferResponse:
    """A unary response whose raw outputs are written after the message's other fields
    when serialized; reading any attribute makes the whole message (tests, tracing)."""

    __slots__ = ("_full", "message", "raw")

    def __init__(self, message: pb.ModelInferResponse, raw: Sequence[bytes | memoryview]):
        self.message = message
        self.raw = raw
        self._full: pb.ModelInferResponse | None = None

    def serialize(self) -> bytes:
        return b"".join(self.parts())

    def parts(self) -> list[raw_fields.Bytes]:
        """The serialized message in pieces, the outputs' bytes where they are: a
        transport that writes a list (the local socket) sends it without the join."""
        entries = raw_fields.entries(raw_fields.RAW_OUTPUT_FIELD, self.raw)
        return [self.message.SerializeToString(), *entries]

    def __getattr__(self, name: str) -> Any:
        if self._full is None:
            self._full = pb.ModelInferResponse.FromString(self.serialize())
        return getattr(self._full, name)


def serialize_infer_response(
    response: Message | WireInferResponse | EncodedInferResponse,
) -> bytes:
    """ModelInfer's response serializer: any of the three kinds of response."""
    if type(response) is EncodedInferResponse:
        return response.data
    if type(response) is WireInferResponse:
        return response.serialize()
    return response.SerializeToString()


def serialized_parts(
    response: Any, serializer: Callable[[Any], bytes]
) -> Sequence[raw_fields.Bytes]:
    """Any method's response serialized, as pieces: a large ModelInfer answer's outputs
    stay where they are (``WireInferResponse.parts``), anything else is one piece."""
    if type(response) is WireInferResponse:
        return response.parts()
    return (serializer(response),)
