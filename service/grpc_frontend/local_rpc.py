"""The gRPC services' unary methods over a Unix socket, for a gateway on the same host.

A unary gRPC round trip between two Python processes costs ~480 µs on the project's
machines against ~50 µs for the same bytes over a Unix socket
(docs/decisions/016-local-rpc-socket.md), and every REST request paid it on top of the
direct path. Here the same method handlers answer (the same request parsers,
restrictions, header forwarding, tracing metadata, status codes and texts); only the
transport differs. A connection carries one call at a time (the gateway keeps a pool),
so an answer needs no id.

The frames are ``wire.local_frames``' (shared with the gateway, which writes the calls).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import stat
import struct
from collections.abc import Callable, Sequence
from typing import Any

import grpc

from wire import local_frames as frames
from wire.buffers import receive_buffer
from wire.raw_fields import Bytes

from .large_messages import serialized_parts

__all__ = ["LocalContext", "LocalRpcServer", "bind_local_socket", "unlink_quietly"]

log = logging.getLogger("service")


class _Aborted(Exception):
    """``context.abort``: the status is already set on the context."""


class LocalContext:
    """The part of ``grpc.aio.ServicerContext`` the servicers use on unary calls."""

    __slots__ = ("_callbacks", "_metadata", "code", "details")

    def __init__(self, metadata: tuple[tuple[str, str], ...]) -> None:
        self._metadata = metadata
        self._callbacks: list[Callable[[Any], None]] | None = None
        self.code = grpc.StatusCode.OK
        self.details = ""

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return self._metadata

    def set_code(self, code: grpc.StatusCode) -> None:
        self.code = code

    def set_details(self, details: str) -> None:
        self.details = details

    async def abort(self, code: grpc.StatusCode, details: str = "", *_: Any) -> None:
        self.code, self.details = code, details
        raise _Aborted

    def add_done_callback(self, callback: Callable[[Any], None]) -> None:
        if self._callbacks is None:
            self._callbacks = []
        self._callbacks.append(callback)

    def done(self) -> None:
        for callback in self._callbacks or ():
            callback(self)


def answer_frame(code: grpc.StatusCode, details: str, payload: Sequence[Bytes] = ()) -> list[Bytes]:
    """The answer's frame as pieces: the payload's are written as they are, not joined."""
    text = details.encode()
    size = sum(memoryview(part).nbytes for part in payload)
    return [frames.answer_head(code.value[0], text, size), text, *payload]


#: Bytes a connection reads at once; frames up to this size are copied out of it.
_READ_BYTES = 256 << 10


class _Connection(asyncio.BufferedProtocol):
    """The loop reads into this connection's own buffer (no ``bytes`` made per read):
    a small frame is copied out of it whole, so it is reused; a frame larger than it
    (a large tensor) is read straight into a buffer of its size, which the request then
    holds views of: one copy from the socket, none after."""

    __slots__ = ("_buffer", "_end", "_large", "_large_filled", "_server", "_start", "_transport")

    def __init__(self, server: LocalRpcServer) -> None:
        self._server = server
        self._buffer = bytearray(_READ_BYTES)
        self._start = 0  # the first byte not yet taken as a frame
        self._end = 0  # the first byte not yet read
        self._large: bytearray | None = None  # the frame being read into its own buffer
        self._large_filled = 0
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        self._server.connections.add(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._transport is not None:
            self._server.connections.discard(self._transport)
        self._transport = None

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._large is not None:
            return memoryview(self._large)[self._large_filled :]
        if self._end == len(self._buffer):  # a frame's start at the end: move it to the front
            kept = self._end - self._start
            self._buffer[:kept] = self._buffer[self._start : self._end]
            self._start, self._end = 0, kept
        return memoryview(self._buffer)[self._end :]

    def buffer_updated(self, nbytes: int) -> None:
        large = self._large
        if large is not None:
            self._large_filled += nbytes
            if self._large_filled == len(large):
                self._large = None
                self._dispatch(memoryview(large))
            return
        self._end += nbytes
        buffer, start, end = self._buffer, self._start, self._end
        while end - start >= 4:
            (size,) = frames.SIZE.unpack_from(buffer, start)
            if size > self._server.max_frame:
                self._refuse(size)
                return
            frame_end = start + 4 + size
            if frame_end <= end:
                with memoryview(buffer) as view:
                    frame = bytes(view[start + 4 : frame_end])
                self._dispatch(memoryview(frame))
                start = frame_end
            elif 4 + size > len(buffer):  # never fits: read the rest into its own buffer
                # Not zero-filled first (wire.buffers): dispatched only once filled.
                large = receive_buffer(size)
                large[: end - start - 4] = buffer[start + 4 : end]
                self._large, self._large_filled = large, end - start - 4
                start = end
                break
            else:
                break
        if start == end:
            start = end = 0
        self._start, self._end = start, end

    def _dispatch(self, frame: memoryview) -> None:
        task = asyncio.get_running_loop().create_task(self._call(frame))
        self._server.tasks.add(task)
        task.add_done_callback(self._server.tasks.discard)

    def _refuse(self, size: int) -> None:
        """A call larger than the server takes: answered as grpc does, then the
        connection ends (its remaining bytes are not read)."""
        text = f"Received message larger than max ({size} vs. {self._server.max_frame})"
        self._send(answer_frame(grpc.StatusCode.RESOURCE_EXHAUSTED, text))
        if self._transport is not None:
            self._transport.close()

    def _send(self, parts: list[Bytes]) -> None:
        if self._transport is not None:
            self._transport.writelines(parts)

    async def _call(self, frame: memoryview) -> None:
        try:
            method, metadata, message = frames.parse_call(frame)
        except (ValueError, UnicodeDecodeError, struct.error):
            self._send(answer_frame(grpc.StatusCode.INVALID_ARGUMENT, frames.MALFORMED))
            return
        handler = self._server.methods.get(method)
        if handler is None:
            self._send(answer_frame(grpc.StatusCode.UNIMPLEMENTED, "Method not found!"))
            return
        context = LocalContext(metadata)
        request = handler.request_deserializer(message)
        payload: Sequence[Bytes] = ()
        try:
            response = await handler.unary_unary(request, context)
            if context.code is grpc.StatusCode.OK:
                payload = serialized_parts(response, handler.response_serializer)
        except _Aborted:
            pass
        except Exception as exc:  # what grpc.aio answers for an exception it did not expect
            log.exception("%s failed", method)
            context.code = grpc.StatusCode.UNKNOWN
            context.details = f"Unexpected {type(exc)}: {exc}"
        if context.code is grpc.StatusCode.OK:
            self._send(answer_frame(context.code, "", payload))
        else:
            self._send(answer_frame(context.code, context.details))
        context.done()


class LocalRpcServer:
    """Serves ``methods`` (full gRPC paths -> unary handlers) on a listening Unix socket."""

    def __init__(self, methods: dict[str, Any], max_message_bytes: int) -> None:
        self.methods = methods
        self.max_frame = max_message_bytes + 65536  # the method and metadata around it
        self.tasks: set[asyncio.Task[None]] = set()
        self.connections: set[asyncio.BaseTransport] = set()
        self._server: asyncio.AbstractServer | None = None

    async def start(self, listening: socket.socket) -> None:
        self._server = await asyncio.get_running_loop().create_unix_server(
            lambda: _Connection(self), sock=listening
        )

    def close(self) -> None:
        """No new connections; open ones keep being served until the process ends."""
        if self._server is not None:
            self._server.close()

    def close_connections(self) -> None:
        for transport in list(self.connections):
            transport.close()


def bind_local_socket(path: str) -> socket.socket:
    """The listening socket at ``path``, readable and writable by this user only. A stale
    socket file (nothing listening) is replaced; one a live server listens on is not."""
    try:
        if stat.S_ISSOCK(os.stat(path).st_mode):
            probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                probe.connect(path)
            except OSError:
                os.unlink(path)  # nobody listens: left behind by a server that died
            else:
                raise OSError(f"failed to start local RPC socket: '{path}' already in use")
            finally:
                probe.close()
    except FileNotFoundError:
        pass
    listening = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old_mask = os.umask(0o177)
    try:
        listening.bind(path)
    except OSError as exc:
        listening.close()
        raise OSError(f"failed to start local RPC socket '{path}': {exc.strerror}") from exc
    finally:
        os.umask(old_mask)
    listening.listen(1024)
    listening.setblocking(False)
    return listening


def unlink_quietly(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)
