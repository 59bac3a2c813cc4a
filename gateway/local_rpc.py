"""The service's unary RPCs through its local socket (``--grpc-local-socket``).

The same RPCs, messages and status codes as over gRPC, framed on a Unix socket instead of
HTTP/2 (the service's ``grpc_frontend/local_rpc.py`` says why; ``wire.local_frames`` defines the
frames): a
gRPC round trip between two Python processes costs several times the REST request it
carries. Streams (generate_stream, decoupled models) stay on the gRPC channel.

A connection carries one call at a time: a calling thread takes one from the pool (or
connects a new one) and gives it back after the answer, so the pool holds at most as
many connections as calls ever ran at once.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable, Sequence
from typing import Any, cast

import grpc
from google.protobuf.descriptor import ServiceDescriptor
from google.protobuf.message import Message
from google.protobuf.message_factory import GetMessageClass

from wire import local_frames as frames

__all__ = ["LocalChannel", "LocalRpcError", "LocalStub"]

_CODES = {code.value[0]: code for code in grpc.StatusCode}


class LocalRpcError(grpc.RpcError):
    """A failed call, answering ``code()`` and ``details()`` as grpc's own error does."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self._code = code
        self._details = details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details


def _read_exactly(connection: socket.socket, size: int) -> bytearray:
    data = bytearray(size)
    view = memoryview(data)
    got = 0
    while got < size:
        count = connection.recv_into(view[got:])
        if count == 0:
            raise ConnectionResetError("socket closed by the service")
        got += count
    return data


def _send_all(connection: socket.socket, parts: list[bytes], total: int) -> None:
    """``sendmsg`` may send part of a large call (a signal in between): send the rest."""
    sent = connection.sendmsg(parts)
    if sent < total:
        connection.sendall(memoryview(b"".join(parts))[sent:])


def _alive(connection: socket.socket) -> bool:
    """An idle connection with something to read was closed by the service (it stopped
    or restarted): one non-blocking peek tells."""
    try:
        return connection.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) != b""
    except BlockingIOError:
        return True
    except OSError:
        return False


class _Method:
    """One unary method, called like a generated stub's: ``method(request, metadata=...)``."""

    __slots__ = ("_name", "_parse", "_stub")

    def __init__(self, channel: LocalChannel, path: str, output: type[Message]) -> None:
        self._stub = channel
        self._name = path.encode()
        # protobuf parses any buffer; its stubs say bytes only.
        self._parse = cast(Callable[[memoryview], Message], output.FromString)

    def __call__(
        self, request: Message, metadata: Sequence[tuple[str, str]] | None = None, **_: Any
    ) -> Any:
        return self._parse(self._stub.call(self._name, request.SerializeToString(), metadata))


class LocalStub:
    """Attributes named for the unary methods of ``service``, as on grpc's stubs."""

    def __init__(self, channel: LocalChannel, service: ServiceDescriptor) -> None:
        for method in service.methods:
            if not (method.client_streaming or method.server_streaming):
                full = f"/{service.full_name}/{method.name}"
                output = GetMessageClass(method.output_type)
                setattr(self, method.name, _Method(channel, full, output))


class LocalChannel:
    """The pool of connections to the service's local socket at ``path``."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._idle: list[socket.socket] = []
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._closed = False

    def call(
        self, method: bytes, payload: bytes, metadata: Sequence[tuple[str, str]] | None
    ) -> memoryview:
        meta = frames.encode_metadata(metadata)
        head, total = frames.call_head(method, meta, len(payload))
        connection = self._take()
        try:
            _send_all(connection, [head, method, meta, payload], total)
            (size,) = frames.SIZE.unpack(_read_exactly(connection, 4))
            answer = _read_exactly(connection, size)
        except OSError as exc:
            self._drop(connection)
            if self._closed:
                raise LocalRpcError(grpc.StatusCode.CANCELLED, "Channel closed") from None
            text = f"connection reset: {exc.strerror or exc}"
            raise LocalRpcError(grpc.StatusCode.UNAVAILABLE, text) from None
        self._give_back(connection)
        code, details, message = frames.parse_answer(answer)
        if code:
            raise LocalRpcError(_CODES.get(code, grpc.StatusCode.UNKNOWN), details)
        return message  # parsed as is: no copy

    def _take(self) -> socket.socket:
        with self._lock:
            if self._closed:
                raise LocalRpcError(grpc.StatusCode.CANCELLED, "Channel closed")
            while self._idle:
                connection = self._idle.pop()
                if _alive(connection):
                    return connection
                self._open.discard(connection)
                connection.close()
        connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            connection.connect(self.path)
        except OSError as exc:
            connection.close()
            text = f"failed to connect to {self.path}: {exc.strerror or exc}"
            raise LocalRpcError(grpc.StatusCode.UNAVAILABLE, text) from None
        with self._lock:
            self._open.add(connection)
        return connection

    def _give_back(self, connection: socket.socket) -> None:
        with self._lock:
            if not self._closed:
                self._idle.append(connection)
                return
        self._drop(connection)

    def _drop(self, connection: socket.socket) -> None:
        with self._lock:
            self._open.discard(connection)
        connection.close()

    def close(self) -> None:
        """Calls still running fail at once (``Channel closed``), as on grpc's channel."""
        with self._lock:
            self._closed = True
            connections, self._open, self._idle = self._open, set(), []
        for connection in connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)
            connection.close()
