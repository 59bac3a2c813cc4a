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
from wire.raw_fields import SplitMessage

__all__ = ["SPLIT_MIN_BYTES", "RawInferRequest", "split_response"]

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


def split_response(data: memoryview) -> SplitMessage[pb.ModelInferResponse] | None:
    """A large answer whose ``raw_output_contents`` are views of ``data``; None when it
    does not walk (protobuf then parses it, or says why not)."""
    return raw_fields.split_message(data, pb.ModelInferResponse, raw_fields.RAW_OUTPUT_FIELD)
