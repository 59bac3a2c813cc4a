"""Batched, length-prefixed frames of pickled messages over one Unix stream socket.

Every message a loop iteration produces goes out in one frame (one ``write``); a frame
read may hold any number of messages, handed over in one call. Messages are small tuples
(``messages.py``); tensor bytes travel in shared-memory slabs, not in frames, except
small ones and what does not fit a slab.
"""

from __future__ import annotations

import asyncio
import pickle
import socket
import struct
from collections.abc import Callable
from typing import Any, cast

__all__ = ["Channel", "recv_hello", "send_hello"]

_HEADER = struct.Struct("<I")
_HELLO_MAX = 1 << 16


class Channel(asyncio.Protocol):
    """One end of the channel. ``on_messages`` gets each received frame's messages;
    ``on_lost`` is called once when the peer goes away (or the transport fails)."""

    def __init__(
        self,
        on_messages: Callable[[list[Any]], None],
        on_lost: Callable[[Exception | None], None],
    ) -> None:
        self._on_messages = on_messages
        self._on_lost = on_lost
        self._transport: asyncio.Transport | None = None
        self._buffer = bytearray()
        self._out: list[Any] = []
        self._flush_scheduled = False
        self._loop = asyncio.get_running_loop()
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport: asyncio's subclasses asyncio.Transport, uvloop's does not.
        self._transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        buffer = self._buffer
        buffer += data
        start = 0
        end = len(buffer)
        messages: list[Any] = []
        with memoryview(buffer) as view:
            while end - start >= 4:
                (size,) = _HEADER.unpack_from(view, start)
                if end - start - 4 < size:
                    break
                messages += pickle.loads(view[start + 4 : start + 4 + size])
                start += 4 + size
        if start:
            del buffer[:start]
        if messages:
            self._on_messages(messages)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._on_lost(exc)

    def send(self, message: Any) -> None:
        """Queue ``message``; every message queued in this loop iteration leaves together."""
        self._out.append(message)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        out, self._out = self._out, []
        if self.closed or self._transport is None or not out:
            return
        data = pickle.dumps(out, protocol=pickle.HIGHEST_PROTOCOL)
        self._transport.write(_HEADER.pack(len(data)) + data)

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()


def send_hello(sock: socket.socket, payload: Any, fds: list[int]) -> None:
    """The blocking handshake before the socket goes to asyncio: a value and some fds."""
    data = pickle.dumps(payload)
    socket.send_fds(sock, [_HEADER.pack(len(data)) + data], fds)


def recv_hello(sock: socket.socket, nfds: int) -> tuple[Any, list[int]]:
    """The peer's ``send_hello``: the fds come with the first bytes of the message."""
    data, fds, _, _ = socket.recv_fds(sock, _HELLO_MAX, nfds)
    if len(data) < 4:
        raise ConnectionError("handshake: peer closed the channel")
    (size,) = _HEADER.unpack_from(data)
    buffer = bytearray(data[4:])
    while len(buffer) < size:
        chunk = sock.recv(size - len(buffer))
        if not chunk:
            raise ConnectionError("handshake: peer closed the channel")
        buffer += chunk
    if len(fds) != nfds:
        raise ConnectionError(f"handshake: expected {nfds} file descriptors, got {len(fds)}")
    return pickle.loads(bytes(buffer)), fds
