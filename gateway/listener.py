"""The HTTP server: the listening socket, its accept thread, one thread per connection
(``http11.Connection``), and the count of requests being answered that a drain waits for.
"""

from __future__ import annotations

import contextlib
import email.utils
import logging
import socket
import ssl
import threading
import time

from .http11 import IDLE_TIMEOUT, Connection, Handler

__all__ = ["MAX_CONNECTIONS", "HttpServer"]

log = logging.getLogger("gateway.http")

#: Connections served at once (a thread each); more are closed at once.
MAX_CONNECTIONS = 4096


class HttpServer:
    """The listening socket, its accept thread, and the connections' threads; counts the
    requests being answered so a drain can wait for them."""

    def __init__(
        self,
        handler: Handler,
        *,
        max_body_bytes: int,
        log_requests: bool = False,
        idle_timeout: float = IDLE_TIMEOUT,
        max_connections: int = MAX_CONNECTIONS,
    ) -> None:
        self.handler = handler
        self.max_body_bytes = max_body_bytes
        self.log_requests = log_requests
        self.idle_timeout = idle_timeout
        self.max_connections = max_connections
        self.ssl_context: ssl.SSLContext | None = None
        self.closing = False
        self.in_flight = 0
        self._connections: set[Connection] = set()
        self._lock = threading.Condition()
        self._sock: socket.socket | None = None
        self._date = (0, b"")

    def start(self, sock: socket.socket, ssl_context: ssl.SSLContext | None = None) -> None:
        """Listen on ``sock`` (bound) and accept in a thread of its own."""
        self.ssl_context = ssl_context
        sock.listen(1024)
        self._sock = sock
        threading.Thread(target=self._accept, name="http-accept", daemon=True).start()

    def _accept(self) -> None:
        assert self._sock is not None
        while not self.closing:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                if self.closing:
                    return
                time.sleep(0.05)  # e.g. out of file descriptors: try again shortly
                continue
            # Linux passes the listener's TCP_NODELAY on; elsewhere it must be set here.
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            connection = Connection(self, conn)
            with self._lock:
                full = len(self._connections) >= self.max_connections
                if not full:
                    self._connections.add(connection)
            if full:
                conn.close()
                continue
            threading.Thread(target=connection.run, name="http-conn", daemon=True).start()

    def forget(self, connection: Connection) -> None:
        with self._lock:
            self._connections.discard(connection)

    def date_line(self) -> bytes:
        """The Date header, formatted once a second rather than per response."""
        now = int(time.time())
        if now != self._date[0]:
            stamp = email.utils.formatdate(now, usegmt=True)
            self._date = (now, f"date: {stamp}\r\n".encode("ascii"))
        return self._date[1]

    def request_started(self) -> None:
        with self._lock:
            self.in_flight += 1

    def request_finished(self) -> None:
        with self._lock:
            self.in_flight -= 1
            if self.in_flight == 0:
                self._lock.notify_all()

    def wait_idle(self, timeout: float) -> bool:
        """Until no request is being answered (streams included); False on timeout."""
        with self._lock:
            return self._lock.wait_for(lambda: self.in_flight == 0, max(0.0, timeout))

    def close(self, grace: float) -> None:
        """Stop listening, close idle connections, give the others ``grace`` seconds to
        finish their answer, then cut what is left."""
        self.closing = True
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.shutdown(socket.SHUT_RDWR)  # wakes the accept thread
            self._sock.close()
        with self._lock:
            connections = list(self._connections)
        for connection in connections:
            if not connection.busy:
                connection.shutdown()
        if not self.wait_idle(grace):
            log.warning("HTTP: %d request(s) still in flight at exit", self.in_flight)
        with self._lock:
            connections = list(self._connections)
        for connection in connections:
            connection.shutdown()
