"""The raw tensor fields of ModelInfer messages, walked and written on the wire.

``raw_input_contents`` (ModelInferRequest, field 7) and ``raw_output_contents``
(ModelInferResponse, field 6) hold the tensor bytes. Protobuf copies them on every parse,
every read of an entry and every serialization; for a large tensor each copy is
milliseconds of memory traffic and page faults. Protobuf lets a repeated field's entries
stand anywhere in a message, so a message is equally well the other fields (parsed or
serialized by protobuf, small) with the raw entries beside them: ``split`` walks a
message's top-level fields and hands out its raw entries as views of the given bytes;
``entries`` writes raw entries as parts to send or join after the other fields;
``split_message`` makes a ``SplitMessage`` of a received one (a large request in the
service's gRPC frontend, a large answer in the REST gateway). The frontend and the gateway
share these (the same messages cross between them on the local socket).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Generic, TypeVar

from google.protobuf.message import Message

__all__ = [
    "RAW_INPUT_FIELD",
    "RAW_OUTPUT_FIELD",
    "SplitMessage",
    "entries",
    "entries_size",
    "split",
    "split_message",
    "varint",
]

RAW_INPUT_FIELD = 7  # ModelInferRequest.raw_input_contents
RAW_OUTPUT_FIELD = 6  # ModelInferResponse.raw_output_contents

Bytes = bytes | bytearray | memoryview


def _read_varint(data: Bytes, at: int, end: int) -> tuple[int, int]:
    """The varint at ``at`` and the offset after it; ValueError past the end or when
    longer than 10 bytes (not protobuf)."""
    value = 0
    shift = 0
    while at < end and shift < 70:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, at
        shift += 7
    raise ValueError("truncated or overlong varint")


def varint(value: int) -> bytes:
    """``value`` (>= 0) as a protobuf varint."""
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def split(data: Bytes, field: int) -> tuple[bytes, list[memoryview]] | None:
    """(the message without field ``field``, that field's entries as views of ``data``),
    or None where ``data`` does not walk as top-level protobuf fields (the caller's
    protobuf parse then gives the refusal). Groups (wire types 3 and 4) are not walked:
    no ModelInfer message has one."""
    view = memoryview(data)
    head: list[memoryview] = []
    raw: list[memoryview] = []
    at = 0
    end = len(view)
    try:
        while at < end:
            start = at
            key, at = _read_varint(view, at, end)
            kind = key & 7
            if kind == 2:
                size, at = _read_varint(view, at, end)
                if size > end - at:
                    return None
                if key >> 3 == field:
                    raw.append(view[at : at + size])
                    at += size
                    continue
                at += size
            elif kind == 0:
                _, at = _read_varint(view, at, end)
            elif kind == 1:
                at += 8
            elif kind == 5:
                at += 4
            else:
                return None
            if at > end:
                return None
            head.append(view[start:at])
    except ValueError:
        return None
    return b"".join(head), raw


def entries(field: int, raw: Sequence[Bytes]) -> list[Bytes]:
    """Tag, length and bytes of each entry: parts to send (scatter) or join, after the
    message's other fields."""
    tag = bytes([(field << 3) | 2])
    parts: list[Bytes] = []
    for data in raw:
        parts += [tag, varint(len(data) if not isinstance(data, memoryview) else data.nbytes), data]
    return parts


def entries_size(raw: Sequence[Bytes]) -> int:
    """Bytes ``entries`` adds to a message (one-byte tags)."""
    total = 0
    for data in raw:
        size = data.nbytes if isinstance(data, memoryview) else len(data)
        total += 1 + len(varint(size)) + size
    return total


M = TypeVar("M", bound=Message)


class SplitMessage(Generic[M]):
    """A received message as protobuf's parse of all but one raw field (``message``,
    small) and that field's entries as views of the bytes it came in (``raw``). The
    field's name (``raw_input_contents``, ``raw_output_contents``) reads as the views;
    every other attribute is the parsed message's, so code written for the protobuf
    message reads either."""

    __slots__ = ("_raw_name", "field", "message", "raw")

    def __init__(self, message: M, field: int, raw: list[memoryview]) -> None:
        self.message = message
        self.field = field
        self.raw = raw
        self._raw_name = message.DESCRIPTOR.fields_by_number[field].name

    def __getattr__(self, name: str) -> Any:
        if name in _OWN:  # a slot not set (a copy under way): no message to ask yet
            raise AttributeError(name)
        if name == self._raw_name:
            return self.raw
        return getattr(self.message, name)

    def ByteSize(self) -> int:
        return self.message.ByteSize() + entries_size(self.raw)

    def SerializeToString(self) -> bytes:
        """The message again (tracing, logging): raw entries after the other fields."""
        return b"".join([self.message.SerializeToString(), *entries(self.field, self.raw)])


_OWN = frozenset(SplitMessage.__slots__)


def split_message(data: Bytes, message_class: type[M], field: int) -> SplitMessage[M] | None:
    """``data`` as a ``message_class`` with field ``field`` split out; None where it does
    not walk or protobuf refuses the rest (the caller's own parse then says why)."""
    found = split(data, field)
    if found is None:
        return None
    head, raw = found
    try:
        message = message_class.FromString(head)
    except Exception:  # a field protobuf refuses
        return None
    return SplitMessage(message, field, raw)
