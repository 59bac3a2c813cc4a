"""close_listeners: the listening sockets on one port close; connections already
accepted, and listeners on other ports, carry on (Linux: /proc/self/fd)."""

from __future__ import annotations

import socket
import sys

import pytest

from service.grpc_frontend.drain_listener import close_listeners

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="reads /proc/self/fd")


def _listener() -> tuple[socket.socket, int]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    return sock, sock.getsockname()[1]


def test_new_connections_are_refused_and_open_ones_go_on() -> None:
    listener, port = _listener()
    other, other_port = _listener()
    with listener, other:
        client = socket.create_connection(("127.0.0.1", port), timeout=5)
        served, _ = listener.accept()
        with client, served:
            assert close_listeners(port) == 1
            with pytest.raises(ConnectionRefusedError):
                socket.create_connection(("127.0.0.1", port), timeout=5)
            client.sendall(b"ping")  # the accepted connection is untouched
            assert served.recv(4) == b"ping"
            served.sendall(b"pong")
            assert client.recv(4) == b"pong"
            # Another port's listener still accepts.
            socket.create_connection(("127.0.0.1", other_port), timeout=5).close()
            # The descriptor now holds an unbound stand-in, which closes as usual.
            assert not listener.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)
        assert close_listeners(port) == 0  # nothing left to close
