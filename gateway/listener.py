"""The HTTP server: the listening socket, its accept thread, one thread per connection
(``http11.Connection``), and the count of requests being answered that a drain waits for.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import ssl
import struct
import threading
import time

from .http11 import IDLE_TIMEOUT, Connection, Handler, ServerState

__all__ = ["MAX_CONNECTIONS", "HttpServer"]

log = logging.getLogger("gateway.http")

#: Connections served at once (a thread each); more are closed at once.
MAX_CONNECTIONS = 4096


class HttpServer:
    """The listening socket, its accept thread, and the connections' threads; the state they
    share (``http11.ServerState``) counts the requests being answered so a drain can wait."""

    def __init__(
        self,
        handler: Handler,
        *,
        max_body_bytes: int,
        log_requests: bool = False,
        idle_timeout: float = IDLE_TIMEOUT,
        max_connections: int = MAX_CONNECTIONS,
    ) -> None:
        self.state = ServerState(handler, max_body_bytes, log_requests, idle_timeout)
        self.max_connections = max_connections
        self.listening = False
        self._sock: socket.socket | None = None

    @property
    def in_flight(self) -> int:
        return self.state.in_flight

    def wait_idle(self, timeout: float) -> bool:
        """Until no request is being answered (streams included); False on timeout."""
        return self.state.wait_idle(timeout)

    def start(self, sock: socket.socket, ssl_context: ssl.SSLContext | None = None) -> None:
        """Listen on ``sock`` (bound) and accept in a thread of its own."""
        self.state.ssl_context = ssl_context
        sock.listen(1024)
        self._sock = sock
        self.listening = True
        threading.Thread(target=self._accept, name="http-accept", daemon=True).start()

    def stop_listening(self) -> None:
        """Refuse new connections from now on; open ones are served as before (a load
        balancer's refused connect goes to another replica, deploy/nginx/README.md).
        Closing resets connections still waiting in the accept queue, so the accept
        thread is first given a moment to take those."""
        if self._sock is None or not self.listening:
            return
        for _ in range(50):  # at most ~50 ms
            if not _accept_queue(self._sock):
                break
            time.sleep(0.001)
        self.listening = False
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)  # wakes the accept thread
        self._sock.close()

    def _accept(self) -> None:
        assert self._sock is not None
        state = self.state
        while not state.closing and self.listening:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                if state.closing or not self.listening:
                    return
                time.sleep(0.05)  # e.g. out of file descriptors: try again shortly
                continue
            # Linux passes the listener's TCP_NODELAY on; elsewhere it must be set here.
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            connection = Connection(state, conn)
            with state.lock:
                full = len(state.connections) >= self.max_connections
                if not full:
                    state.connections.add(connection)
            if full:
                conn.close()
                continue
            threading.Thread(target=connection.run, name="http-conn", daemon=True).start()

    def close(self, grace: float) -> None:
        """Stop listening, close idle connections, give the others ``grace`` seconds to
        finish their answer, then cut what is left."""
        state = self.state
        state.closing = True
        self.listening = False
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.shutdown(socket.SHUT_RDWR)  # wakes the accept thread
            self._sock.close()
        with state.lock:
            connections = list(state.connections)
        for connection in connections:
            if not connection.busy:
                connection.shutdown()
        if not state.wait_idle(grace):
            log.warning("HTTP: %d request(s) still in flight at exit", state.in_flight)
        with state.lock:
            connections = list(state.connections)
        for connection in connections:
            connection.shutdown()


def _accept_queue(sock: socket.socket) -> int:
    """Connections waiting to be accepted (TCP_INFO's tcpi_unacked on a listener; 0
    where the option is missing)."""
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 104)
        return int(struct.unpack_from("I", info, 24)[0])
    except (OSError, AttributeError, struct.error):
        return 0
