"""ModelInfer messages whose tensor bytes stay out of protobuf, on the local socket.

A REST request's binary inputs are slices of the HTTP body; protobuf would copy each into
the request message, copy the message again to serialize it, and the answer's outputs
once more on parse and again on each read. On the service's local socket the gateway
sends a request as its other fields followed by the raw entries, scattered from where
they are (``RawInferRequest.parts``), and reads a large answer's raw outputs as views of
the bytes received (``split_response``). The same messages on the wire
(``wire/raw_fields.py``); a gRPC stub, which needs a protobuf message, gets the whole one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from inference import grpc_service_pb2 as pb
from wire import raw_fields

__all__ = ["SPLIT_MIN_BYTES", "RawInferRequest", "SplitInferResponse", "split_response"]

#: Answers at least this large have their raw outputs read in place.
SPLIT_MIN_BYTES = 256 << 10


class RawInferRequest:
    """A ModelInferRequest as its other fields (``message``) and its raw inputs."""

    __slots__ = ("message", "raw")

    def __init__(self, message: pb.ModelInferRequest, raw: Sequence[bytes | memoryview]) -> None:
        self.message = message
        self.raw = raw

    def parts(self) -> list[Any]:
        """The serialized message in pieces, the raw inputs uncopied."""
        entries = raw_fields.entries(raw_fields.RAW_INPUT_FIELD, self.raw)
        return [self.message.SerializeToString(), *entries]

    def SerializeToString(self) -> bytes:
        return b"".join(self.parts())

    def whole(self) -> pb.ModelInferRequest:
        """One protobuf message holding copies of the raw inputs (a gRPC stub's)."""
        full = pb.ModelInferRequest()
        full.CopyFrom(self.message)
        full.raw_input_contents.extend(r if type(r) is bytes else bytes(r) for r in self.raw)
        return full


class SplitInferResponse:
    """A ModelInferResponse whose ``raw_output_contents`` are views of the answer's bytes;
    every other attribute is the parsed message's."""

    __slots__ = ("_message", "raw_output_contents")

    def __init__(self, message: pb.ModelInferResponse, raw: list[memoryview]) -> None:
        self._message = message
        self.raw_output_contents = raw

    def __getattr__(self, name: str) -> Any:
        return getattr(self._message, name)


def split_response(data: memoryview) -> SplitInferResponse | None:
    """A large answer with its raw outputs in place; None when it does not walk (protobuf
    then parses it, or says why not)."""
    found = raw_fields.split(data, raw_fields.RAW_OUTPUT_FIELD)
    if found is None:
        return None
    head, raw = found
    try:
        message = pb.ModelInferResponse.FromString(head)
    except Exception:  # a field protobuf refuses
        return None
    return SplitInferResponse(message, raw)
