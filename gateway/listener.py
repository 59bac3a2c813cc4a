"""The HTTP server: the listening socket, its accept thread, the parker (``parking.py``)
that holds connections waiting for a request, the pool of threads that serve the others
(``http11.Connection.serve``), and the count of requests being answered that a drain
waits for.
"""

from __future__ import annotations

import contextlib
import logging
import resource
import socket
import ssl
import struct
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from .http11 import IDLE_TIMEOUT, Connection, Handler, ServerState
from .parking import Parkable, Parker

__all__ = ["MAX_CONNECTIONS", "MAX_THREADS", "HttpServer"]

log = logging.getLogger("gateway.http")

#: Connections open at once (parked ones cost a descriptor, no thread); a new one past it
#: sheds the longest-parked, or is closed when every one is being answered. Lowered to
#: what the process's descriptor limit allows.
MAX_CONNECTIONS = 65536
#: Threads serving connections that have something to read or answer.
MAX_THREADS = 1024
#: Descriptors kept for everything else (the upstream channel, logs, shared memory).
_RESERVED_FDS = 256


def _descriptor_budget() -> int:
    """Raise the soft descriptor limit to the hard one; what connections may use of it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
    return max(64, soft - _RESERVED_FDS)


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
        max_threads: int = MAX_THREADS,
    ) -> None:
        self.state = ServerState(handler, max_body_bytes, log_requests, idle_timeout)
        self.max_connections = min(max_connections, _descriptor_budget())
        self.listening = False
        self._sock: socket.socket | None = None
        self._threads = ThreadPoolExecutor(max_threads, thread_name_prefix="http-conn")
        self._parker = Parker(self._dispatch, self.max_connections, idle_timeout)

    def _dispatch(self, connection: Parkable) -> None:
        """The parker saw bytes (or the end) on a parked connection: serve it in a pool
        thread, then park it again or count it closed."""
        try:
            self._threads.submit(self._serve, connection)
        except RuntimeError:  # the pool was shut down: the server is closing
            connection.close()
            self._parker.closed()

    def _serve(self, connection: Parkable) -> None:
        assert isinstance(connection, Connection)
        if connection.serve() and not self.state.closing:
            self._parker.park(connection)
        else:
            connection.close()
            self._parker.closed()

    @property
    def in_flight(self) -> int:
        return self.state.in_flight

    @property
    def open_connections(self) -> int:
        """Connections open now: parked, being answered, or their header arriving."""
        with self.state.lock:
            return len(self.state.connections)

    def watch_connections(self, on_busy: Callable[[bool], None]) -> None:
        """``on_busy(True)`` as the first connection opens, ``(False)`` as the last closes,
        in order; called now with whether any is open (the service's stop asks it:
        ``service_link.py``)."""
        with self.state.lock:
            self.state.on_busy = on_busy
            on_busy(bool(self.state.connections))

    def wait_no_connections(self, timeout: float) -> bool:
        """Until every connection has closed; False on timeout."""
        return self.state.wait_no_connections(timeout)

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
            state.add(connection)
            self._parker.add(connection)  # parked until it sends something

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
        self._parker.stop()
        self._threads.shutdown(wait=False)


def _accept_queue(sock: socket.socket) -> int:
    """Connections waiting to be accepted (TCP_INFO's tcpi_unacked on a listener; 0
    where the option is missing)."""
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 104)
        return int(struct.unpack_from("I", info, 24)[0])
    except (OSError, AttributeError, struct.error):
        return 0
