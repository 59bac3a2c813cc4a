"""One gateway process: bind, serve until SIGTERM/SIGINT, drain, exit.

Logs ``Started HTTPService at HOST:PORT`` (Triton's wording) once it accepts requests;
with ``--http-port 0`` that line is how callers learn the port. A port that cannot be
bound, or an unusable certificate, is one error line and exit code 1.

On the first SIGTERM/SIGINT, as the service does: readiness turns false and the listener
closes at once (new connections are refused, so a load balancer moves to another
replica), requests on open connections are still served for a lame-duck second and get
503 after it, requests in flight get up to ``--exit-timeout-secs`` to finish, then the
connections close. A second signal stops at once.
"""

from __future__ import annotations

import logging
import signal
import ssl
import threading
import time
from typing import TYPE_CHECKING

from .app import GatewayApp
from .config import GatewayConfig, HttpsConfig
from .listener import HttpServer
from .sockets import StartError, bind

if TYPE_CHECKING:
    from .workers import WorkerLink

__all__ = ["serve", "ssl_context"]

log = logging.getLogger("gateway")

#: After the exit timeout: how long requests whose RPC was cancelled get to answer.
_CUT_OFF_GRACE = 0.5
#: After SIGTERM closes the listener, requests arriving on open connections (a balancer's
#: kept connection) are still served this long, at most half the exit timeout, as the
#: service does (docs/architecture.md, "Start-up and shutdown").
LAME_DUCK_S = 1.0


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
    """SIGTERM/SIGINT (or the workers' supervisor going away): the first drains, a
    second one stops at once."""

    def __init__(self, app: GatewayApp, lame_duck_s: float) -> None:
        self._app = app
        self.lame_duck_s = lame_duck_s
        self.requested = threading.Event()
        self.forced = threading.Event()

    def __call__(self, *_: object) -> None:
        if self.requested.is_set():
            self.forced.set()
            return
        self._app.begin_drain(self.lame_duck_s)
        self.requested.set()


def serve(config: GatewayConfig, worker: WorkerLink | None = None) -> int:
    """Serve until stopped; 0 after a clean stop, 1 when the service could not start."""
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
    stop = _Stop(app, min(LAME_DUCK_S, config.exit_timeout_secs / 2))
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, stop)
    if worker is None:
        log.info("REST gateway in front of %s", config.upstream)
        log.info("Started HTTPService at %s:%d%s", host, port, scheme)
    else:
        number = f"{worker.index + 1} of {worker.count}"
        log.info("HTTP worker %s serving %s:%d%s", number, host, port, scheme)
        worker.serving(stop)
    while not stop.requested.wait(1.0):  # a timeout keeps signal handlers running
        pass
    _drain(app, server, config.exit_timeout_secs, stop)
    app.shutdown()
    return 0


def _drain(app: GatewayApp, server: HttpServer, exit_timeout: float, stop: _Stop) -> None:
    """Close the listener, serve open connections for the lame duck, and let requests in
    flight finish. Those still running at the exit timeout have their RPC cancelled and
    get a last moment to answer 503 before the connections close."""
    deadline = time.monotonic() + exit_timeout
    forced = stop.forced
    server.stop_listening()
    log.info(
        "Stopping: readiness false, waiting up to %gs for %d in-flight request(s)",
        exit_timeout,
        server.in_flight,
    )
    forced.wait(stop.lame_duck_s)  # requests on open connections are still served
    while not forced.is_set() and time.monotonic() < deadline:
        if server.wait_idle(min(0.1, deadline - time.monotonic())):
            break
    grace = 0.0 if forced.is_set() else max(0.1, deadline - time.monotonic())
    if server.in_flight:
        log.warning("Exit timeout: %d request(s) still in flight", server.in_flight)
        app.close_channel()
        grace = 0.0 if forced.is_set() else _CUT_OFF_GRACE
    server.close(grace)
