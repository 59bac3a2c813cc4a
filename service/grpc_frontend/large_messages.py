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

__all__ = [
    "SPLIT_MIN_BYTES",
    "SplitInferRequest",
    "WireInferResponse",
    "serialize_infer_response",
    "split_infer_request",
]

#: Messages (requests) or raw outputs (responses) at least this large take the split path.
SPLIT_MIN_BYTES = 256 << 10
_RAW_INPUT_FIELD = 7
_RAW_OUTPUT_TAG = bytes([(6 << 3) | 2])  # field 6, length-delimited


def _varint(data: bytes, at: int) -> tuple[int, int]:
    """The varint at ``at`` and the offset after it; ValueError past the end or when
    longer than 10 bytes (not protobuf)."""
    value = 0
    shift = 0
    end = len(data)
    while at < end and shift < 70:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, at
        shift += 7
    raise ValueError("truncated or overlong varint")


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


class SplitInferRequest:
    """A ``ModelInferRequest`` whose ``raw_input_contents`` are views of the bytes it
    arrived in; every other attribute is the parsed message's."""

    __slots__ = ("_message", "raw_input_contents")

    def __init__(self, message: pb.ModelInferRequest, raw: list[memoryview]) -> None:
        self._message = message
        self.raw_input_contents = raw

    def __getattr__(self, name: str) -> Any:
        return getattr(self._message, name)

    def ByteSize(self) -> int:
        return self._message.ByteSize() + sum(
            1 + len(_encode_varint(len(r))) + len(r) for r in self.raw_input_contents
        )

    def SerializeToString(self) -> bytes:
        """The message again (tracing, logging): raw entries after the other fields."""
        parts: list[bytes | memoryview] = [self._message.SerializeToString()]
        tag = bytes([(_RAW_INPUT_FIELD << 3) | 2])
        for raw in self.raw_input_contents:
            parts += [tag, _encode_varint(len(raw)), raw]
        return b"".join(parts)


def split_infer_request(data: bytes) -> SplitInferRequest | None:
    """``data`` as a split request; None where it does not walk as a well-formed message
    (protobuf's own parse then gives the refusal)."""
    view = memoryview(data)
    head: list[memoryview] = []
    raw: list[memoryview] = []
    at = 0
    end = len(data)
    try:
        while at < end:
            start = at
            key, at = _varint(data, at)
            kind = key & 7
            if kind == 2:
                size, at = _varint(data, at)
                if at + size > end:
                    return None
                if key >> 3 == _RAW_INPUT_FIELD:
                    raw.append(view[at : at + size])
                    at += size
                    continue
                at += size
            elif kind == 0:
                _, at = _varint(data, at)
            elif kind == 1:
                at += 8
            elif kind == 5:
                at += 4
            else:  # groups are not in this message
                return None
            if at > end:
                return None
            head.append(view[start:at])
        message = pb.ModelInferRequest.FromString(b"".join(head))
    except Exception:  # a malformed varint or a field protobuf refuses
        return None
    return SplitInferRequest(message, raw)


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
        parts: list[bytes | memoryview] = [self.message.SerializeToString()]
        for data in self.raw:
            parts += [_RAW_OUTPUT_TAG, _encode_varint(len(data)), data]
        return b"".join(parts)

    def __getattr__(self, name: str) -> Any:
        if self._full is None:
            self._full = pb.ModelInferResponse.FromString(self.serialize())
        return getattr(self._full, name)


def serialize_infer_response(response: Message | WireInferResponse) -> bytes:
    """ModelInfer's response serializer: either kind of response."""
    if type(response) is WireInferResponse:
        return response.serialize()
    return response.SerializeToString()
