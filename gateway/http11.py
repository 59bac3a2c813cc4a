"""HTTP/1.1 for the gateway: blocking reads and writes in a pool thread while a connection
has something to answer, parked without a thread while it waits (``parking.py``);
httptools (llhttp) parses, we frame.

Why threads and blocking calls rather than an event loop, and why not uvicorn
(docs/decisions/015-gateway-http-layer.md): a blocking gRPC call wakes the thread
that waits for it directly, where grpc.aio's answer crosses a poller thread and then the
event loop, so each request costs one thread wake-up less; and Triton's frontend
(libevhtp) accepts ``Transfer-Encoding: chunked`` together with ``Content-Length`` (the
chunked coding wins), which uvicorn refuses.

Per connection, requests are answered one at a time in arrival order (reading waits
while one is answered). A whole body goes out in one write with its head; a stream in
chunked transfer coding as its chunks come, until a write finds the client gone.
``Expect: 100-continue`` is answered as soon as the headers are read. What keeps a
hostile client bounded: the header block (431), the body (413 as soon as its size is
known, then the connection closes), a read or write that waits ``idle_timeout`` seconds
closes the connection, a parked connection idle that long is closed, and the server
(``listener.py``) keeps at most ``max_connections`` open, shedding the longest-parked one
(idle, or a header still arriving) for a new one.
"""

from __future__ import annotations

import collections
import contextlib
import email.utils
import http
import logging
import select
import socket
import ssl
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import httptools

from wire.buffers import receive_buffer

from .errors import GatewayError
from .messages import HttpRequest, HttpResponse, error_response
from .sockets import send_parts

__all__ = [
    "IDLE_TIMEOUT",
    "LINGER",
    "MAX_HEADER_BYTES",
    "Connection",
    "Handler",
    "ServerState",
    "body_too_large",
]

log = logging.getLogger("gateway.http")

Handler = Callable[[HttpRequest], HttpResponse]

#: Request line and headers together; more is refused with 431.
MAX_HEADER_BYTES = 64 * 1024
#: A read or write on a connection that waits this long closes it (idle keep-alive, or
#: a client that stopped sending or reading).
IDLE_TIMEOUT = 75.0
#: How long a served connection keeps its thread waiting for the client's next bytes
#: before it is parked (``parking.py``).
LINGER = 0.005

_STATUS_LINES = {s.value: f"HTTP/1.1 {s.value} {s.phrase}\r\n".encode() for s in http.HTTPStatus}
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
#: Below glibc's mmap threshold: each recv() allocates this much before it shrinks.
_READ_SIZE = 64 * 1024
#: A body of declared length from this size on is received into one buffer of that length
#: (``recv_into``): no 64 KiB pieces copied by the parser and joined again.
_DIRECT_BODY = 256 * 1024
#: The most one ``recv_into`` of such a body asks for: a server closing is seen between.
_DIRECT_READ = 4 << 20


def body_too_large(size: int, limit: int) -> GatewayError:
    return GatewayError(
        413,
        f"request body of {size} bytes exceeds the gateway's limit of {limit} bytes "
        "(--http-max-body-bytes)",
    )


class _Incoming:
    """One request as it is parsed; ``early`` is an answer decided before its body."""

    __slots__ = (
        "buffer",
        "chunks",
        "early",
        "expect",
        "headers",
        "headers_done",
        "http10",
        "keep_alive",
        "method",
        "query",
        "size",
        "url",
    )

    def __init__(self) -> None:
        self.method = "GET"
        self.url = b"/"
        self.query = b""
        self.headers: dict[str, str] = {}
        self.headers_done = False
        self.chunks: list[bytes] = []
        self.buffer: bytearray | None = None  # a large body of declared length
        self.size = 0
        self.keep_alive = True
        self.http10 = False
        self.expect = False  # a 100 Continue is owed once the request's turn comes
        self.early: HttpResponse | None = None


@dataclass(eq=False)
class ServerState:
    """What every connection of one HTTP server shares: the handler and limits, whether the
    server is closing, the open connections and the requests being answered (which a drain
    waits for). The listener owns it; connections read and update it."""

    handler: Handler
    max_body_bytes: int
    log_requests: bool = False
    idle_timeout: float = IDLE_TIMEOUT
    ssl_context: ssl.SSLContext | None = None
    closing: bool = False
    in_flight: int = 0
    connections: set[Connection] = field(default_factory=set)
    lock: threading.Condition = field(default_factory=threading.Condition)
    #: Called, under ``lock`` (so in order), with True as the first connection opens and
    #: False as the last closes (``HttpServer.watch_connections``).
    on_busy: Callable[[bool], None] | None = None
    _date: tuple[int, bytes] = (0, b"")

    def add(self, connection: Connection) -> None:
        with self.lock:
            self.connections.add(connection)
            if len(self.connections) == 1 and self.on_busy is not None:
                self.on_busy(True)

    def forget(self, connection: Connection) -> None:
        with self.lock:
            if connection not in self.connections:
                return
            self.connections.discard(connection)
            if not self.connections:
                self.lock.notify_all()  # a stop waits for the last one (wait_no_connections)
                if self.on_busy is not None:
                    self.on_busy(False)

    def wait_no_connections(self, timeout: float) -> bool:
        """Until no connection is open (Triton's HTTP stop counts them); False on timeout."""
        with self.lock:
            return self.lock.wait_for(lambda: not self.connections, timeout)

    def date_line(self) -> bytes:
        """The Date header, formatted once a second rather than per response."""
        now = int(time.time())
        if now != self._date[0]:
            stamp = email.utils.formatdate(now, usegmt=True)
            self._date = (now, f"date: {stamp}\r\n".encode("ascii"))
        return self._date[1]

    def request_started(self) -> None:
        with self.lock:
            self.in_flight += 1

    def request_finished(self) -> None:
        with self.lock:
            self.in_flight -= 1
            if self.in_flight == 0:
                self.lock.notify_all()

    def wait_idle(self, timeout: float) -> bool:
        """Until no request is being answered (streams included); False on timeout."""
        with self.lock:
            return self.lock.wait_for(lambda: self.in_flight == 0, max(0.0, timeout))


class Connection:
    """One client connection: read, parse, answer in order; parked between requests."""

    def __init__(self, server: ServerState, sock: socket.socket) -> None:
        self._server = server
        self._sock = sock
        self._parser = _new_parser(self)
        self._url = b""
        self._header_bytes = 0
        self._incoming: _Incoming | None = None  # being parsed
        self._ready: collections.deque[_Incoming] = collections.deque()  # parsed, waiting
        self._discard = False  # input after a refused request is ignored
        self._close = False  # close after the answers owed
        self._closed = False
        self._started = False
        self._request_began = 0.0  # when the request being parsed began
        #: Since when the connection has waited for the client (the parker's order).
        self.waiting_since = time.monotonic()
        #: Answering a request (a shutdown closes only connections that are not).
        self.busy = False

    def fileno(self) -> int:
        return self._sock.fileno()

    def serve(self) -> bool:
        """Serve what the client has sent, in a thread of the listener's pool. True when
        the connection now waits for its next request, or for the rest of a header that
        is slow to come: the caller parks it (no thread while it waits). False once it
        is closed."""
        try:
            if not self._started:
                self._start()
            sock = self._sock
            while not self._close:
                if self._ready:
                    self._answer(self._ready.popleft())
                    continue
                incoming = self._incoming
                if incoming is not None and incoming.expect:
                    incoming.expect = False
                    sock.sendall(_CONTINUE)
                if self._server.closing:
                    break
                # A body being received keeps its thread (a read waits idle_timeout at most);
                # between requests and inside a header, a client that is not sending parks.
                receiving = incoming is not None and incoming.headers_done
                if receiving and incoming is not None and incoming.buffer is not None:
                    self._receive_body(incoming)
                    continue
                if not receiving and not self._readable_soon():
                    # A header still arriving has waited since its request began.
                    self.waiting_since = (
                        time.monotonic() if incoming is None else self._request_began
                    )
                    return True
                data = sock.recv(_READ_SIZE)
                if not data:
                    break
                self._feed(data)
        except (OSError, ssl.SSLError):
            pass  # the client left, timed out, or failed the TLS handshake
        except Exception:
            log.exception("HTTP connection failed")
        self.close()
        return False

    def _start(self) -> None:
        """Kernel timeouts on the blocking socket (a Python-level timeout would add a poll()
        to every read and write; an expired one raises OSError), then TLS."""
        self._started = True
        sock = self._sock
        timeout = self._server.idle_timeout
        seconds = int(timeout)
        value = struct.pack("ll", seconds, int((timeout - seconds) * 1e6))
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, value)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, value)
        if self._server.ssl_context is not None:
            self._sock = self._server.ssl_context.wrap_socket(sock, server_side=True)

    def _readable_soon(self) -> bool:
        """Whether the client's next bytes are there, or come within LINGER (a keep-alive
        client's next request usually does: no hand-over to the parker and back)."""
        sock = self._sock
        if isinstance(sock, ssl.SSLSocket) and sock.pending():
            return True
        poller = select.poll()  # not select(): descriptors past 1024 are common here
        poller.register(sock, select.POLLIN)
        return bool(poller.poll(LINGER * 1000))

    def close(self) -> None:
        """Close the socket once and forget the connection."""
        if self._closed:
            return
        self._closed = True
        self._server.forget(self)
        with contextlib.suppress(OSError):
            self._sock.close()

    def shutdown(self) -> None:
        """Wake the thread out of a read or write (server shutdown)."""
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)

    # -- parsing ------------------------------------------------------------------------

    def _feed(self, data: bytes) -> None:
        if self._discard:
            return
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._discard = True  # no protocol switch: answer what was read, then close
            self._close_after_ready()
        except httptools.HttpParserError as exc:
            self._refuse(GatewayError(400, f"malformed HTTP request: {exc}"))

    def on_message_begin(self) -> None:
        if not self._discard:
            self._request_began = time.monotonic()
            self._incoming = _Incoming()
            self._url = b""
            self._header_bytes = 0

    def on_url(self, url: bytes) -> None:
        self._url += url
        self._count_header_bytes(len(url))

    def on_header(self, name: bytes, value: bytes) -> None:
        incoming = self._incoming
        if incoming is None:
            return
        # Triton's frontend reads the first of a repeated header.
        incoming.headers.setdefault(name.decode("latin-1").lower(), value.decode("latin-1"))
        self._count_header_bytes(len(name) + len(value) + 4)

    def on_headers_complete(self) -> None:
        incoming = self._incoming
        if incoming is None:
            return
        incoming.headers_done = True
        parser = self._parser
        # The path routes; the query string goes along undecoded (as Triton's frontend,
        # which routes on the URI's path).
        incoming.url, _, incoming.query = self._url.partition(b"?")
        incoming.method = parser.get_method().decode("ascii", "replace")
        incoming.keep_alive = parser.should_keep_alive()
        incoming.http10 = parser.get_http_version() == "1.0"
        headers = incoming.headers
        if "transfer-encoding" in headers and "content-length" in headers:
            incoming.keep_alive = False  # accepted (chunked wins), but not trusted further
        declared = headers.get("content-length", "")
        limit = self._server.max_body_bytes
        if declared.isdigit() and int(declared) > limit:
            self._refuse(body_too_large(int(declared), limit))
            return
        if (
            declared.isdigit()
            and int(declared) >= _DIRECT_BODY
            and "transfer-encoding" not in headers
        ):
            # Not zero-filled (bytearray(n) would write every byte, and fault every page
            # in, before the socket writes them): fresh pages until received into, so a
            # client that declares much and sends little commits only what it sent. The
            # request is handled only once all of it is received.
            incoming.buffer = receive_buffer(int(declared))
        if headers.get("expect", "").lower() == "100-continue" and not incoming.http10:
            if self._ready:
                incoming.expect = True  # sent when the requests before it are answered
            else:
                self._sock.sendall(_CONTINUE)

    def on_body(self, body: bytes) -> None:
        incoming = self._incoming
        if incoming is None:
            return
        start = incoming.size
        incoming.size += len(body)
        if incoming.size > self._server.max_body_bytes:
            self._refuse(body_too_large(incoming.size, self._server.max_body_bytes))
            return
        if incoming.buffer is not None:
            incoming.buffer[start : incoming.size] = body
        else:
            incoming.chunks.append(body)

    def _receive_body(self, incoming: _Incoming) -> None:
        """The rest of a large body of declared length, read into its buffer (the bytes
        the parser saw with the head are there already). The parser, left in the body,
        is replaced by a fresh one for the next request on the connection."""
        buffer = incoming.buffer
        assert buffer is not None
        total = len(buffer)
        with memoryview(buffer) as view:
            while incoming.size < total:
                if self._server.closing:
                    return  # the serve loop sees it and closes
                count = self._sock.recv_into(
                    view[incoming.size :], min(total - incoming.size, _DIRECT_READ)
                )
                if count == 0:
                    raise ConnectionResetError("the client closed inside the body")
                incoming.size += count
        self._parser = _new_parser(self)
        self.on_message_complete()

    def on_message_complete(self) -> None:
        incoming = self._incoming
        if incoming is not None:
            self._incoming = None
            self._ready.append(incoming)

    def _count_header_bytes(self, size: int) -> None:
        self._header_bytes += size
        if self._header_bytes > MAX_HEADER_BYTES and self._incoming is not None:
            self._refuse(
                GatewayError(431, f"request header block exceeds {MAX_HEADER_BYTES} bytes")
            )

    def _refuse(self, error: GatewayError) -> None:
        """Answer ``error`` in this request's turn, then close; ignore further input."""
        incoming = self._incoming or _Incoming()
        self._incoming = None
        incoming.early = error_response(error)
        self._ready.append(incoming)
        self._discard = True
        self._close_after_ready()

    def _close_after_ready(self) -> None:
        if self._ready:
            self._ready[-1].keep_alive = False
        else:
            self._close = True

    # -- answering ----------------------------------------------------------------------

    def _answer(self, incoming: _Incoming) -> None:
        server = self._server
        server.request_started()
        self.busy = True
        response: HttpResponse | None = None
        try:
            response = incoming.early
            if response is None:
                chunks = incoming.chunks
                body: bytes | bytearray
                if incoming.buffer is not None:
                    body = incoming.buffer
                else:
                    body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
                request = HttpRequest(incoming.method, incoming.url, incoming.headers, body)
                request.query = incoming.query
                if server.log_requests:
                    log.debug("HTTP request: %s %s", request.method, request.raw_path.decode())
                response = server.handler(request)
            keep = incoming.keep_alive and not server.closing
            if response.stream is None:
                parts = [response.body, *response.parts]
                length = sum(memoryview(part).nbytes for part in parts)
                head = self._head(response.status, response.headers, length, keep)
                _sent(response)  # before the last write: whoever reads the answer sees it done
                if incoming.method == "HEAD" or not length:
                    self._sock.sendall(head)
                else:  # the body as it is, beside the head: a large one is not copied
                    send_parts(self._sock, [head, *parts], len(head) + length)
            else:
                keep = self._send_stream(response, keep, incoming.http10)
            if not keep:
                self._close = True
        finally:
            self.busy = False
            if response is not None:
                _sent(response)
            server.request_finished()

    def _send_stream(self, response: HttpResponse, keep: bool, http10: bool) -> bool:
        """Chunked transfer coding (HTTP/1.0: raw bytes, then close); True to keep alive.
        A write that finds the client gone ends the stream (closing it cancels its RPC)."""
        assert response.stream is not None
        stream = response.stream
        headers = response.headers
        if not http10:
            headers = [*headers, (b"transfer-encoding", b"chunked")]
        sock = self._sock
        try:
            sock.sendall(self._head(response.status, headers, None, keep and not http10))
            for chunk in stream:
                if chunk:
                    sock.sendall(chunk if http10 else b"%x\r\n%b\r\n" % (len(chunk), chunk))
            _sent(response)
            if not http10:
                sock.sendall(b"0\r\n\r\n")
        finally:
            stream.close()
        return keep and not http10

    def _head(
        self, status: int, headers: list[tuple[bytes, bytes]], length: int | None, keep: bool
    ) -> bytes:
        parts = [_STATUS_LINES.get(status) or b"HTTP/1.1 %d Unknown\r\n" % status]
        for name, value in headers:
            parts += (name, b": ", value, b"\r\n")
        if length is not None:
            parts.append(b"content-length: %d\r\n" % length)
        parts.append(self._server.date_line())
        parts.append(b"\r\n" if keep else b"connection: close\r\n\r\n")
        return b"".join(parts)


def _new_parser(connection: Connection) -> httptools.HttpRequestParser:
    parser = httptools.HttpRequestParser(connection)
    parser.set_dangerous_leniencies(lenient_chunked_length=True)
    return parser


def _sent(response: HttpResponse) -> None:
    """Run the response's ``on_sent`` once."""
    done, response.on_sent = response.on_sent, None
    if done is not None:
        done()
