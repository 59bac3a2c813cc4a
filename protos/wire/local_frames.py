"""The frames of the local socket (``--grpc-local-socket``): the service's unary RPCs for a
gateway on the same host, without HTTP/2 (docs/decisions/016-local-rpc-socket.md says why).

Frames, little-endian, each preceded by its size (u32, the bytes after it):
  call:   u16 method length | u32 metadata length | method | metadata | request message
  answer: u8 status code    | u32 details length  | details (UTF-8) | response message
Metadata is ``key\\0value\\0`` repeated (UTF-8). A connection carries one call at a time, so
an answer needs no id. The service reads calls and writes answers
(``service/grpc_frontend/local_rpc.py``), the gateway the other way (``gateway/local_rpc.py``).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

__all__ = [
    "MALFORMED",
    "SIZE",
    "answer_head",
    "call_head",
    "decode_metadata",
    "encode_metadata",
    "parse_answer",
    "parse_call",
]

#: The size before every frame.
SIZE = struct.Struct("<I")
_CALL = struct.Struct("<IHI")  # size, method length, metadata length
_ANSWER = struct.Struct("<IBI")  # size, code, details length
_CALL_FIELDS = _CALL.size - SIZE.size
_ANSWER_FIELDS = _ANSWER.size - SIZE.size

MALFORMED = "malformed local RPC call: the frame does not hold a method, metadata and message"


def encode_metadata(metadata: Sequence[tuple[str, str]] | None) -> bytes:
    if not metadata:
        return b""
    return "".join(f"{key}\0{value}\0" for key, value in metadata).encode()


def decode_metadata(raw: bytes) -> tuple[tuple[str, str], ...]:
    if not raw:
        return ()
    parts = raw.decode().split("\0")
    return tuple(zip(parts[0:-1:2], parts[1::2], strict=True))


def call_head(method: bytes, metadata: bytes, payload_bytes: int) -> tuple[bytes, int]:
    """The size and fields before a call's method, metadata and message; and the whole
    frame's length, size included."""
    size = _CALL_FIELDS + len(method) + len(metadata) + payload_bytes
    return _CALL.pack(size, len(method), len(metadata)), size + SIZE.size


def parse_call(frame: memoryview) -> tuple[str, tuple[tuple[str, str], ...], memoryview]:
    """A call frame (after its size) -> (method, metadata, message bytes). ValueError (or a
    decoding error) where the frame's own lengths do not fit it."""
    if len(frame) < _CALL_FIELDS:
        raise ValueError(MALFORMED)
    method_length, metadata_length = struct.unpack_from("<HI", frame)
    start = _CALL_FIELDS
    end = start + method_length + metadata_length
    if end > len(frame):
        raise ValueError(MALFORMED)
    method = bytes(frame[start : start + method_length]).decode()
    metadata = decode_metadata(bytes(frame[start + method_length : end]))
    return method, metadata, frame[end:]


def answer_head(code: int, details: bytes, payload_bytes: int) -> bytes:
    """The size and fields before an answer's details and message."""
    return _ANSWER.pack(_ANSWER_FIELDS + len(details) + payload_bytes, code, len(details))


def parse_answer(frame: memoryview | bytearray) -> tuple[int, str, memoryview]:
    """An answer frame (after its size) -> (status code, details, message bytes, not
    copied)."""
    code, length = struct.unpack_from("<BI", frame)
    details = bytes(frame[_ANSWER_FIELDS : _ANSWER_FIELDS + length]).decode() if code else ""
    return code, details, memoryview(frame)[_ANSWER_FIELDS + length :]
