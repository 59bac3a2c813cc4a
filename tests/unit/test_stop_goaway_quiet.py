"""When the stop may send GOAWAY: no byte arrived lately, nothing unread
(``service/grpc_frontend/goaway.py``), on real loopback connections of this process."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator

import pytest

from service.grpc_frontend.goaway import connections_quiet, wait_quiet


@pytest.fixture
def pair() -> Iterator[tuple[int, socket.socket, socket.socket]]:
    """(server port, accepted connection, client connection)."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        client = socket.create_connection(("127.0.0.1", port))
        accepted, _ = listener.accept()
    with client, accepted:
        yield port, accepted, client


def test_unread_bytes_are_never_quiet(pair: tuple[int, socket.socket, socket.socket]) -> None:
    port, accepted, client = pair
    client.sendall(b"a request on its way")
    assert not connections_quiet(port, quiet_s=0.0)
    assert accepted.recv(100) == b"a request on its way"
    assert connections_quiet(port, quiet_s=0.0)


def test_quiet_once_nothing_arrived_for_the_span(
    pair: tuple[int, socket.socket, socket.socket],
) -> None:
    port, accepted, client = pair
    client.sendall(b"x")
    assert accepted.recv(1) == b"x"
    assert not connections_quiet(port, quiet_s=60.0)  # data came less than a minute ago
    assert asyncio.run(wait_quiet(port, 10.0, quiet_s=0.05))


def test_other_ports_do_not_count(pair: tuple[int, socket.socket, socket.socket]) -> None:
    port, _, client = pair
    client.sendall(b"unread")
    with socket.create_server(("127.0.0.1", 0)) as other:
        assert connections_quiet(other.getsockname()[1], quiet_s=60.0)
    assert not connections_quiet(port, quiet_s=0.0)
