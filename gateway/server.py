"""One gateway process: bind, serve until SIGTERM/SIGINT, drain, exit.

Logs ``Started HTTPService at HOST:PORT`` (Triton's wording) once it accepts requests;
with ``--http-port 0`` that line is how callers learn the port. A port that cannot be
bound, or an unusable certificate, is one error line and exit code 1.

On the first SIGTERM/SIGINT, or when the service it follows starts its stop
(``service_link.py``), Triton's HTTP stop (src/http_server.cc, ``HTTPServer::Stop``): the
listener closes (new connections are refused, so a load balancer moves to another
replica), requests on the open connections are served as before, and once a second
``Timeout N: Found M HTTP service connections`` is logged, counting the exit timeout down,
until no connection is left or the timeout is spent. Connections still open then are
closed; a request still running on one gets no answer (Triton's client reads the end of
the connection and not a byte), its RPC is cancelled, and the process exits 1, as Triton
does with work left at the exit timeout. The seconds left, and how many requests were cut
off, go back to the service, whose core stop gets them. A second signal stops at once.
"""

from __future__ import annotations

import logging
import signal
import ssl
import threading
from typing import TYPE_CHECKING

from .app import GatewayApp
from .config import GatewayConfig, HttpsConfig
from .listener import HttpServer
from .sockets import StartError, bind

if TYPE_CHECKING:
    from .workers import WorkerLink

__all__ = ["serve", "ssl_context"]

log = logging.getLogger("gateway")


def ssl_context(https: HttpsConfig | None) -> ssl.SSLContext | None:
    """HTTPS settings; with a root certificate, client certificates are verified against it
    (required with ``--https-require-client-cert``: the handshake fails without one)."""
    if https is None:
        return None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_cert_chain(str(https.cert), str(https.key))
        if https.root_cert is not None:
            context.load_verify_locations(str(https.root_cert))
            required = https.require_client_cert
            context.verify_mode = ssl.CERT_REQUIRED if required else ssl.CERT_OPTIONAL
    except (OSError, ssl.SSLError) as exc:
        raise StartError(f"unusable HTTPS certificate or key: {exc}") from None
    return context


class _Stop:
    """SIGTERM/SIGINT, the service's stop, or the workers' supervisor going away: the first
    starts the HTTP stop with an exit timeout (the service's, or ours), a second signal
    stops at once. Only a second signal does: serve.sh signals the service and the gateway
    together, and the service's notice may come first."""

    def __init__(self, app: GatewayApp, exit_timeout: float) -> None:
        self._app = app
        self._exit_timeout = exit_timeout
        self.seconds = exit_timeout
        self.requested = threading.Event()
        self.forced = threading.Event()
        self._signalled = False
        self._lock = threading.RLock()  # a second signal may come inside the first

    def __call__(self, *_: object) -> None:
        self.begin(self._exit_timeout, signal=True)

    def begin(self, seconds: float, *, signal: bool = False) -> None:
        with self._lock:
            if signal:
                if self._signalled:
                    self.forced.set()
                    return
                self._signalled = True
            if self.requested.is_set():
                return
            self.seconds = seconds
            self._app.begin_drain(seconds)
            self.requested.set()


def serve(config: GatewayConfig, worker: WorkerLink | None = None) -> int:
    """Serve until stopped; 0 after a clean stop, 1 when the service could not start or
    the exit timeout abandoned requests in flight (Triton exits 1 when its core still has
    work at the exit timeout: these requests are such work)."""
    try:
        sock = bind(config.http_address, config.http_port, reuse_port=worker is not None)
        context = ssl_context(config.https)
    except StartError as exc:
        log.error("failed to start HTTP service: %s", exc)
        return 1
    app = GatewayApp(config)
    app.startup()
    server = HttpServer(
        app.handle, max_body_bytes=config.max_body_bytes, log_requests=config.log_verbose > 0
    )
    server.start(sock, context)
    host, port = sock.getsockname()[:2]
    scheme = ""
    if context is not None:
        mutual = context.verify_mode == ssl.CERT_REQUIRED
        scheme = " (HTTPS, client certificates required)" if mutual else " (HTTPS)"
    stop = _Stop(app, config.exit_timeout_secs)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, stop)
    link = app.follow_service(stop.begin, server.watch_connections)
    if worker is None:
        log.info("REST gateway in front of %s", config.upstream)
        log.info("Started HTTPService at %s:%d%s", host, port, scheme)
    else:
        number = f"{worker.index + 1} of {worker.count}"
        log.info("HTTP worker %s serving %s:%d%s", number, host, port, scheme)
        worker.serving(stop)
    while not stop.requested.wait(1.0):  # a timeout keeps signal handlers running
        pass
    left = _stop_http(server, stop)
    cut = server.in_flight  # requests the spent exit timeout abandons
    if link is not None:
        link.report(left, cut)  # the service's core stop gets what is left
    _close(server, cut)
    app.shutdown()
    return 1 if cut else 0


def _stop_http(server: HttpServer, stop: _Stop) -> float:
    """Triton's HTTP stop: no new connection, the open ones served while the exit timeout
    counts down a second at a time (each second logged, as Triton logs it); returns the
    seconds left. Ends early when the last connection closes."""
    server.stop_listening()
    left = stop.seconds
    while left > 0 and not stop.forced.is_set():
        count = server.open_connections
        if not count:
            break
        log.info("Timeout %g: Found %d HTTP service connections", left, count)
        server.wait_no_connections(min(1.0, left))
        left = max(0.0, left - 1)
    return left


def _close(server: HttpServer, cut: int) -> None:
    """Close what is still open. A request still running (``cut`` of them) gets no answer:
    Triton's HTTP endpoint is gone once its exit timeout is spent, and its client reads
    the connection's end (FIN) and no bytes. So its connection is shut first, and only
    then (``app.shutdown``) its RPC cancelled, which frees its thread: the error that the
    cancel returns finds the socket shut and is never sent."""
    if cut:
        log.warning("Exit timeout: %d request(s) still in flight", cut)
    server.close(0.0)
