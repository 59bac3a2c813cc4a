"""Small unary ModelInfer responses written as wire bytes, without a protobuf message.

Building a ``ModelInferResponse`` (the message, an output message per output, each
field set, then its serialization) was the largest piece of Python per request in a
frontend after validation. Everything but the request id and the tensor bytes repeats
from one response of a model to the next: the model's name and version, and each
output's name, datatype and shape. Those fields are serialized once per such set and
kept (``_HEADS``); a response is then that head, its id and its raw outputs, joined.

The bytes are those protobuf's own serializer writes for the same message (fields in
number order, proto3 defaults left out, shapes packed), which the tests check; only
responses without parameters take this path (``codec.encode_unary_infer_response``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from inference import grpc_service_pb2 as pb
from wire.raw_fields import varint

from ..types import InferResponse

__all__ = ["EncodedInferResponse", "encode_small_response"]

#: (model name, version, ((output name, datatype, shape), ...))
Key = tuple[str, str, tuple[tuple[str, str, tuple[int, ...]], ...]]
#: Key -> (the fields before the id, the outputs' fields); past HEADS_MAX entries the
#: cache starts over.
_HEADS: dict[Key, tuple[bytes, bytes]] = {}
HEADS_MAX = 4096

_ID_TAG = b"\x1a"  # ModelInferResponse.id, field 3
_RAW_TAG = b"\x32"  # ModelInferResponse.raw_output_contents, field 6
_LENGTHS = [varint(n) for n in range(1 << 14)]  # the length prefixes of small fields


def _length(size: int) -> bytes:
    return _LENGTHS[size] if size < 16384 else varint(size)


def _string(tag: int, text: str) -> bytes:
    """A string field; nothing when empty (proto3's default)."""
    if not text:
        return b""
    data = text.encode()
    return bytes([tag]) + _length(len(data)) + data


def _signed(value: int) -> bytes:
    """An int64 as protobuf writes it: a negative one as its 64-bit two's complement."""
    return varint(value & 0xFFFFFFFFFFFFFFFF)


def _output(name: str, datatype: str, shape: tuple[int, ...]) -> bytes:
    """One ``outputs`` entry (field 5): name (1), datatype (2), shape packed (3)."""
    body = _string(0x0A, name) + _string(0x12, datatype)
    if shape:
        packed = b"".join(_signed(d) for d in shape)
        body += b"\x1a" + _length(len(packed)) + packed
    return b"\x2a" + _length(len(body)) + body


def _heads(
    key: tuple[str, str, tuple[tuple[str, str, tuple[int, ...]], ...]],
) -> tuple[bytes, bytes]:
    heads = _HEADS.get(key)
    if heads is None:
        name, version, outputs = key
        before = _string(0x0A, name) + _string(0x12, version)
        after = b"".join(_output(*output) for output in outputs)
        if len(_HEADS) >= HEADS_MAX:
            _HEADS.clear()
        heads = _HEADS[key] = (before, after)
    return heads


def encode_small_response(response: InferResponse, raw: Sequence[bytes]) -> bytes:
    """``response`` (no parameters) with its outputs' wire bytes ``raw``, serialized."""
    outputs = tuple([(o.name, o.datatype, o.array.shape) for o in response.outputs])
    before, after = _heads((response.model_name, response.model_version, outputs))
    parts = [before]
    request_id = response.id
    if request_id:
        data = request_id.encode()
        parts += (_ID_TAG, _length(len(data)), data)
    parts.append(after)
    for entry in raw:
        parts += (_RAW_TAG, _length(len(entry)), entry)
    return b"".join(parts)


class EncodedInferResponse:
    """A unary response already in wire form (``data``); reading any other attribute
    parses it into the message (tests, tracing), as ``WireInferResponse`` does."""

    __slots__ = ("_full", "data")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self._full: pb.ModelInferResponse | None = None

    def __getattr__(self, name: str) -> Any:
        if self._full is None:
            self._full = pb.ModelInferResponse.FromString(self.data)
        return getattr(self._full, name)
