"""Drive a GatewayApp in-process through its real HTTP layer (``gateway.http11``).

``call(app, ...)`` serves the app on 127.0.0.1:0 (one ``HttpServer`` per app, started on
first use) and makes one request on a fresh connection from a worker thread, so an
in-process grpc.aio fake service keeps running on the test's event loop meanwhile.
``close_servers`` (an autouse fixture in the modules that use ``call``) stops them.
"""

from __future__ import annotations

import asyncio
import http.client
from collections.abc import Iterator

import pytest

from gateway.app import GatewayApp
from gateway.listener import HttpServer
from gateway.sockets import bind

_SERVERS: dict[GatewayApp, tuple[HttpServer, int]] = {}


def port_of(app: GatewayApp) -> int:
    """The port serving ``app`` (started on first use)."""
    entry = _SERVERS.get(app)
    if entry is None:
        server = HttpServer(app.handle, max_body_bytes=app.config.max_body_bytes)
        sock = bind("127.0.0.1", 0)
        server.start(sock)
        entry = _SERVERS[app] = (server, sock.getsockname()[1])
    return entry[1]


def roundtrip(
    port: int, method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request(method, path, body=body or None, headers=headers or {})
        response = conn.getresponse()
        data = response.read()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, data
    finally:
        conn.close()


async def call(
    app: GatewayApp,
    method: str,
    path: str,
    body: bytes = b"",
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, str], bytes]:
    """One request through the app's HTTP server: (status, headers, body)."""
    port = port_of(app)
    return await asyncio.to_thread(roundtrip, port, method, path, body, headers)


@pytest.fixture(autouse=True)
def close_servers() -> Iterator[None]:
    yield
    while _SERVERS:
        _, (server, _) = _SERVERS.popitem()
        server.close(0.0)
