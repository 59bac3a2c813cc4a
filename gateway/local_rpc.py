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

from inference import grpc_service_pb2 as pb
from wire import local_frames as frames
from wire.buffers import receive_buffer

from .raw_messages import SPLIT_MIN_BYTES, RawInferRequest, split_response
from .sockets import send_parts

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
    """``size`` bytes from the service, received straight into a buffer that is not
    zero-filled first (``wire.buffers``): every byte is written before it is read."""
    data = receive_buffer(size)
    view = memoryview(data)
    got = 0
    while got < size:
        count = connection.recv_into(view[got:])
        if count == 0:
            raise ConnectionResetError("socket closed by the service")
        got += count
    return data


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
        if output is pb.ModelInferResponse:
            self._parse = _parse_infer_response

    def __call__(
        self,
        request: Message | RawInferRequest,
        metadata: Sequence[tuple[str, str]] | None = None,
        **_: Any,
    ) -> Any:
        if type(request) is RawInferRequest:  # the raw inputs sent from where they are
            parts = request.parts()
        else:
            parts = [request.SerializeToString()]
        return self._parse(self._stub.call(self._name, parts, metadata))


def _parse_infer_response(answer: memoryview) -> Any:
    """A large answer's raw outputs are read in place (raw_messages.py)."""
    if len(answer) >= SPLIT_MIN_BYTES:
        split = split_response(answer)
        if split is not None:
            return split
    return pb.ModelInferResponse.FromString(answer)  # type: ignore[arg-type]


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
        self, method: bytes, payload: list[Any], metadata: Sequence[tuple[str, str]] | None
    ) -> memoryview:
        """``payload``: the serialized message in one or more parts (bytes-like)."""
        meta = frames.encode_metadata(metadata)
        size = sum(memoryview(p).nbytes for p in payload)
        head, total = frames.call_head(method, meta, size)
        connection = self._take()
        try:
            send_parts(connection, [head, method, meta, *payload], total)
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
