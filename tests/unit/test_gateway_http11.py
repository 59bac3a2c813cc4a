"""The gateway's HTTP/1.1 layer (gateway/http11.py) over real loopback sockets, with a
handler that echoes what it was given: framing, keep-alive and pipelining, Expect,
``Transfer-Encoding: chunked`` with ``Content-Length``, limits, streams, shutdown."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import threading
import time
from collections.abc import Callable, Generator, Iterator

import pytest
from proc_info import rss_mb

from gateway.http11 import MAX_HEADER_BYTES
from gateway.listener import HttpServer
from gateway.messages import HttpRequest, HttpResponse
from gateway.sockets import StartError, bind

STREAM_CLOSED = threading.Event()
SLOW = threading.Event()


def _events(count: int) -> Generator[bytes, None, None]:
    try:
        for index in range(count):
            yield b"data: %d\n\n" % index
            if count > 100:
                time.sleep(0.01)
    finally:
        STREAM_CLOSED.set()


def echo(request: HttpRequest) -> HttpResponse:
    path = request.raw_path.decode()
    if path.startswith("/stream/"):
        return HttpResponse(200, stream=_events(int(path.rsplit("/", 1)[1])))
    if path == "/slow":
        SLOW.wait(5)
    doc = {
        "method": request.method,
        "path": path,
        "query": request.query.decode(),
        "body": request.body.decode("latin-1"),
        "headers": request.headers,
    }
    return HttpResponse(200, json.dumps(doc).encode())


@pytest.fixture
def server() -> Iterator[tuple[HttpServer, int]]:
    STREAM_CLOSED.clear()
    SLOW.clear()
    http = HttpServer(echo, max_body_bytes=1000, idle_timeout=2.0)
    sock = bind("127.0.0.1", 0)
    http.start(sock)
    try:
        yield http, sock.getsockname()[1]
    finally:
        SLOW.set()
        http.close(1.0)


def _connect(port: int) -> socket.socket:
    conn = socket.create_connection(("127.0.0.1", port), timeout=5)
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return conn


def _read_response(conn: socket.socket, buffer: bytearray) -> tuple[int, dict[str, str], bytes]:
    """One response (Content-Length, chunked, or until close) from ``conn``."""

    def fill() -> bool:
        data = conn.recv(65536)
        buffer.extend(data)
        return bool(data)

    while b"\r\n\r\n" not in buffer:
        if not fill():
            raise ConnectionError("closed before a response head")
    head, _, rest = bytes(buffer).partition(b"\r\n\r\n")
    buffer[:] = rest
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:])}
    if "content-length" in headers:
        size = int(headers["content-length"])
        while len(buffer) < size:
            if not fill():
                break
        body = bytes(buffer[:size])
        buffer[:] = buffer[size:]
        return status, headers, body
    if headers.get("transfer-encoding") == "chunked":
        body = b""
        while True:
            while b"\r\n" not in buffer:
                fill()
            line, _, _ = bytes(buffer).partition(b"\r\n")
            size = int(line, 16)
            while len(buffer) < len(line) + 2 + size + 2:
                fill()
            body += bytes(buffer[len(line) + 2 : len(line) + 2 + size])
            buffer[:] = buffer[len(line) + 2 + size + 2 :]
            if size == 0:
                return status, headers, body
    while fill():
        pass
    body = bytes(buffer)
    buffer.clear()
    return status, headers, body


def _exchange(port: int, raw: bytes) -> tuple[int, dict[str, str], bytes]:
    with _connect(port) as conn:
        conn.sendall(raw)
        return _read_response(conn, bytearray())


def test_chunked_body_with_content_length_is_accepted(server: tuple[HttpServer, int]) -> None:
    """As libevhtp (Triton) accepts it: the chunked coding wins; the connection then
    closes, as RFC 9112 advises for such a message."""
    chunked = b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"
    raw = (
        b"POST /x HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n"
        b"Content-Length: %d\r\n\r\n%b" % (len(chunked), chunked)
    )
    status, headers, body = _exchange(server[1], raw)
    assert status == 200
    assert json.loads(body)["body"] == "hello world"
    assert headers["connection"] == "close"


def test_expect_100_continue_is_answered_before_the_body(server: tuple[HttpServer, int]) -> None:
    with _connect(server[1]) as conn:
        conn.sendall(
            b"POST /x HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n"
        )
        assert conn.recv(100) == b"HTTP/1.1 100 Continue\r\n\r\n"
        conn.sendall(b"abc")
        status, _, body = _read_response(conn, bytearray())
    assert status == 200 and json.loads(body)["body"] == "abc"


def test_keep_alive_and_pipelining_answer_in_order(server: tuple[HttpServer, int]) -> None:
    with _connect(server[1]) as conn:
        buffer = bytearray()
        conn.sendall(b"GET /one HTTP/1.1\r\nHost: h\r\n\r\n")
        assert json.loads(_read_response(conn, buffer)[2])["path"] == "/one"
        conn.sendall(
            b"GET /two HTTP/1.1\r\nHost: h\r\n\r\n"
            b"POST /three HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n\r\nhi"
        )
        second = _read_response(conn, buffer)
        third = _read_response(conn, buffer)
    assert json.loads(second[2])["path"] == "/two"
    assert json.loads(third[2]) | {"headers": {}} == {
        "method": "POST",
        "path": "/three",
        "query": "",
        "body": "hi",
        "headers": {},
    }
    assert "connection" not in second[1]  # kept alive


def test_a_response_is_one_write_with_date_and_length(server: tuple[HttpServer, int]) -> None:
    status, headers, body = _exchange(
        server[1], b"GET /x HTTP/1.1\r\nHost: h\r\nA: 1\r\nA: 2\r\n\r\n"
    )
    assert status == 200 and int(headers["content-length"]) == len(body)
    assert headers["date"].endswith("GMT")
    assert json.loads(body)["headers"]["a"] == "1"  # a repeated header: the first, as Triton


def test_the_query_string_is_not_part_of_the_path(server: tuple[HttpServer, int]) -> None:
    """tritonclient.http's ``query_params`` append one; routing sees only the path."""
    status, _, body = _exchange(server[1], b"GET /x/y?a=1&b=%20 HTTP/1.1\r\nHost: h\r\n\r\n")
    assert status == 200
    doc = json.loads(body)
    assert (doc["path"], doc["query"]) == ("/x/y", "a=1&b=%20")


def test_http10_closes_after_the_answer(server: tuple[HttpServer, int]) -> None:
    status, headers, _ = _exchange(server[1], b"GET /x HTTP/1.0\r\n\r\n")
    assert status == 200 and headers["connection"] == "close"


def test_head_has_no_body(server: tuple[HttpServer, int]) -> None:
    with _connect(server[1]) as conn:
        conn.sendall(b"HEAD /x HTTP/1.1\r\nHost: h\r\n\r\nGET /y HTTP/1.1\r\nHost: h\r\n\r\n")
        data = b""
        while data.count(b"HTTP/1.1 200") < 2 or not data.endswith(b"}"):
            data += conn.recv(65536)
    assert data.index(b"HTTP/1.1 200", 10) < data.index(b"{")  # HEAD's answer had no body


@pytest.mark.parametrize(
    "raw",
    [
        b"POST /x HTTP/1.1\r\nHost: h\r\nContent-Length: 5000\r\n\r\n",
        b"POST /x HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
        + b"200\r\n"
        + b"x" * 512
        + b"\r\n"
        + b"200\r\n"
        + b"x" * 512
        + b"\r\n",
    ],
)
def test_a_body_over_the_limit_is_413_and_closes(
    server: tuple[HttpServer, int], raw: bytes
) -> None:
    with _connect(server[1]) as conn:
        conn.sendall(raw)
        status, headers, body = _read_response(conn, bytearray())
        assert conn.recv(10) == b""  # closed
    assert status == 413 and headers["connection"] == "close"
    assert b"--http-max-body-bytes" in body


def test_a_huge_header_block_is_431(server: tuple[HttpServer, int]) -> None:
    raw = b"GET /x HTTP/1.1\r\nHost: h\r\nX: " + b"a" * (MAX_HEADER_BYTES + 10) + b"\r\n\r\n"
    with _connect(server[1]) as conn:
        conn.sendall(raw)
        status, _, body = _read_response(conn, bytearray())
    assert status == 431 and b"header block" in body


def test_garbage_is_400_and_closes(server: tuple[HttpServer, int]) -> None:
    status, headers, body = _exchange(server[1], b"NOT HTTP AT ALL\r\n\r\n")
    assert status == 400 and headers["connection"] == "close"
    assert b"malformed HTTP request" in body


def test_streams_go_out_chunked(server: tuple[HttpServer, int]) -> None:
    status, headers, body = _exchange(server[1], b"GET /stream/3 HTTP/1.1\r\nHost: h\r\n\r\n")
    assert status == 200 and headers["transfer-encoding"] == "chunked"
    assert body == b"data: 0\n\ndata: 1\n\ndata: 2\n\n"
    assert STREAM_CLOSED.wait(2)


def test_a_client_that_leaves_closes_the_stream(server: tuple[HttpServer, int]) -> None:
    conn = _connect(server[1])
    conn.sendall(b"GET /stream/100000 HTTP/1.1\r\nHost: h\r\n\r\n")
    seen = b""
    while b"data: 0" not in seen:
        seen += conn.recv(65536)
    conn.close()
    assert STREAM_CLOSED.wait(5)  # the next writes failed and the generator was closed


def test_idle_connections_are_closed(server: tuple[HttpServer, int]) -> None:
    with _connect(server[1]) as conn:
        conn.settimeout(10)
        start = time.monotonic()
        assert conn.recv(10) == b""
    assert 1.5 < time.monotonic() - start < 8


def _until(check: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 10
    while not check():
        assert time.monotonic() < deadline, "not reached in 10 s"
        time.sleep(0.01)


def test_the_first_open_and_the_last_close_are_told_in_order(
    server: tuple[HttpServer, int],
) -> None:
    """What the service's stop asks of the gateway (service_link.py): whether any HTTP
    connection is open, told at once and at each change, however many are open."""
    http, port = server
    told: list[bool] = []
    http.watch_connections(told.append)
    assert told == [False]
    first, second = _connect(port), _connect(port)
    _until(lambda: http.open_connections == 2)
    assert told == [False, True]
    first.close()
    _until(lambda: http.open_connections == 1)
    assert told == [False, True]
    assert _exchange(port, b"GET /x HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n")[0] == 200
    second.close()
    _until(lambda: http.open_connections == 0)
    assert told == [False, True, False]


def test_close_waits_for_requests_in_flight() -> None:
    http = HttpServer(echo, max_body_bytes=1000)
    sock = bind("127.0.0.1", 0)
    http.start(sock)
    port = sock.getsockname()[1]
    SLOW.clear()
    idle = _connect(port)
    busy = _connect(port)
    busy.sendall(b"GET /slow HTTP/1.1\r\nHost: h\r\n\r\n")
    deadline = time.monotonic() + 5
    while http.in_flight == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not http.wait_idle(0.05)
    threading.Timer(0.3, SLOW.set).start()
    http.close(5.0)
    assert idle.recv(10) == b""  # an idle connection is closed at once
    status, headers, _ = _read_response(busy, bytearray())
    assert status == 200 and headers["connection"] == "close"  # the in-flight one finished
    idle.close()
    busy.close()


def test_a_busy_port_is_one_clear_error() -> None:
    first = bind("127.0.0.1", 0)
    first.listen(1)
    port = first.getsockname()[1]
    try:
        with pytest.raises(StartError) as info:
            bind("127.0.0.1", port)
        assert str(info.value) == f"Socket '127.0.0.1:{port}' already in use"
    finally:
        first.close()


def _digest(request: HttpRequest) -> HttpResponse:
    return HttpResponse(200, hashlib.sha256(request.body).hexdigest().encode())


def test_a_large_declared_body_commits_only_what_has_arrived() -> None:
    """A body of declared length is received into a buffer that is not zero-filled first
    (wire/buffers.py): with 128 MiB declared and 1 MiB sent, the server has about 1 MiB
    more memory, not 128 (``bytearray(n)`` wrote all of it before the first byte came).
    Once all of it is sent, the handler gets exactly those bytes."""
    declared = 128 << 20
    first = os.urandom(1 << 20)
    http = HttpServer(_digest, max_body_bytes=declared, idle_timeout=30.0)
    sock = bind("127.0.0.1", 0)
    http.start(sock)
    try:
        with _connect(sock.getsockname()[1]) as conn:
            before = rss_mb(os.getpid())
            assert before is not None
            conn.sendall(b"POST /x HTTP/1.1\r\nHost: h\r\nContent-Length: %d\r\n\r\n" % declared)
            conn.sendall(first)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:  # until the server has read what was sent
                incoming = [c._incoming for c in list(http.state.connections)]
                if any(i is not None and i.size >= len(first) for i in incoming):
                    break
                time.sleep(0.01)
            else:
                raise AssertionError("the server never read the first MiB")
            grown = rss_mb(os.getpid())
            assert grown is not None and grown - before < 48, (before, grown)
            rest = bytes(declared - len(first))
            conn.sendall(rest)
            status, _, body = _read_response(conn, bytearray())
        assert status == 200
        assert body.decode() == hashlib.sha256(first + rest).hexdigest()
    finally:
        http.close(1.0)
