"""``python -m gateway``: parse flags, bind the HTTP socket, serve until SIGTERM/SIGINT.

Logs ``Started HTTPService at HOST:PORT`` (Triton's wording) once it accepts requests;
with ``--http-port 0`` that line is how callers learn the port.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import signal
import socket
import ssl
import struct
import sys
import time
from collections.abc import Iterator, Sequence

import uvicorn

from .app import GatewayApp
from .config import GatewayConfig, HttpsConfig, parse_args

log = logging.getLogger("gateway")

#: After SIGTERM closes the listener, requests on connections accepted just before are
#: still served this long (bounded by half the exit timeout), as the service does.
LAME_DUCK_S = 1.0


def _bind(config: GatewayConfig) -> socket.socket:
    family = socket.AF_INET6 if ":" in config.http_address else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # Inherited by accepted connections on Linux: responses go out as two writes (head,
    # body), which Nagle + delayed ACK would hold back ~40 ms on an event loop that does
    # not set it per connection.
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind((config.http_address, config.http_port))
    sock.listen(1024)
    sock.set_inheritable(True)
    return sock


class _Server(uvicorn.Server):
    """uvicorn's server, logging Triton's start-up line once it accepts requests, and
    draining on SIGTERM as the service does: the listener closes and readiness turns
    false at once, new requests on open connections are served for ``LAME_DUCK_S`` and
    refused after, in-flight ones finish, then exit within ``exit_timeout`` seconds."""

    def __init__(
        self,
        config: uvicorn.Config,
        sock: socket.socket,
        target: str,
        app: GatewayApp,
        exit_timeout: float,
    ) -> None:
        super().__init__(config)
        self._sock = sock
        self._target = target
        self._app = app
        self._exit_timeout = exit_timeout
        self._lame_duck_s = min(LAME_DUCK_S, exit_timeout / 2)
        self._drain: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def handle_exit(self, sig: int, frame: object) -> None:
        """First signal: drain; a second one stops at once (uvicorn's own handling)."""
        if self._loop is None or self._app.draining:
            super().handle_exit(sig, frame)  # type: ignore[arg-type]
            return
        self._app.begin_drain(self._lame_duck_s)
        self._loop.call_soon_threadsafe(self._start_drain)

    def _start_drain(self) -> None:
        self._drain = asyncio.ensure_future(self._drain_then_exit())

    async def _close_listener(self) -> None:
        """New connections are refused from now on, as Triton's HTTP endpoint does while it
        stops: a load balancer retries a refused connect on another replica, never a 503
        to a POST it already sent (deploy/nginx/README.md). Closing resets connections
        still in the accept queue, so the loop first accepts those (briefly)."""
        for _ in range(50):  # at most ~50 ms
            if not _accept_queue(self._sock):
                break
            await asyncio.sleep(0.001)
        for server in self.servers:
            server.close()

    async def _drain_then_exit(self) -> None:
        deadline = time.monotonic() + self._exit_timeout
        await self._close_listener()
        log.info(
            "Stopping: readiness false, waiting up to %gs for %d in-flight request(s)",
            self._exit_timeout,
            self._app.in_flight,
        )
        # Requests still arriving on connections accepted just before are served first.
        await asyncio.sleep(self._lame_duck_s)
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._app.wait_idle(), self._exit_timeout)
        if self._app.in_flight:
            log.warning("Exit timeout: %d request(s) still in flight", self._app.in_flight)
        # uvicorn then closes the listener and idle connections, and cancels what still
        # runs once the remaining time is spent.
        remaining = max(0.1, deadline - time.monotonic())
        # uvicorn types it int; it only goes to asyncio.wait_for, which takes a float.
        self.config.timeout_graceful_shutdown = remaining  # type: ignore[assignment]
        self.should_exit = True

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        """SIGTERM/SIGINT stop gracefully and the process exits 0, as the service does.

        (uvicorn's own version re-raises the signal after shutting down.)
        """
        handled = (signal.SIGINT, signal.SIGTERM)
        original = {sig: signal.signal(sig, self.handle_exit) for sig in handled}
        try:
            yield
        finally:
            for sig, handler in original.items():
                signal.signal(sig, handler)

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        await super().startup(sockets=sockets)
        if self.started:
            host, port = self._sock.getsockname()[:2]
            log.info("REST gateway in front of the gRPC service at %s", self._target)
            scheme = ""
            if self.config.ssl:
                mutual = self.config.ssl_cert_reqs == ssl.CERT_REQUIRED
                scheme = " (HTTPS, client certificates required)" if mutual else " (HTTPS)"
            log.info("Started HTTPService at %s:%d%s", host, port, scheme)


async def serve(config: GatewayConfig) -> int:
    """Run uvicorn (httptools) on our own socket; 0 after a clean stop."""
    sock = _bind(config)
    app = GatewayApp(config)
    https = config.https
    uv_config = uvicorn.Config(
        app,
        loop="none",
        http="httptools",
        ws="none",
        lifespan="on",
        access_log=config.log_verbose > 0,
        log_level="info" if config.log_verbose > 0 else "warning",
        server_header=False,
        proxy_headers=False,  # no per-request middleware: the gateway trusts no forwarded headers
        timeout_graceful_shutdown=math.ceil(config.exit_timeout_secs) or 1,
        ssl_certfile=str(https.cert) if https is not None else None,
        ssl_keyfile=str(https.key) if https is not None else None,
        ssl_ca_certs=str(https.root_cert) if https and https.root_cert else None,
        ssl_cert_reqs=_client_cert_mode(https),
    )
    server = _Server(uv_config, sock, config.grpc_target, app, config.exit_timeout_secs)
    try:
        await server.serve(sockets=[sock])
    finally:
        sock.close()
    return 0 if server.started else 1


def _accept_queue(sock: socket.socket) -> int:
    """Connections waiting to be accepted (TCP_INFO's tcpi_unacked on a listener; 0
    where the option is missing)."""
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 104)
        return int(struct.unpack_from("I", info, 24)[0])
    except (OSError, AttributeError, struct.error):
        return 0


def _client_cert_mode(https: HttpsConfig | None) -> ssl.VerifyMode:
    """Mutual TLS for REST callers: with ``--https-root-cert`` a presented client
    certificate must verify against it; ``--https-require-client-cert`` also refuses
    connections that present none (the TLS handshake fails, no request is read)."""
    if https is None or https.root_cert is None:
        return ssl.CERT_NONE
    return ssl.CERT_REQUIRED if https.require_client_cert else ssl.CERT_OPTIONAL


class _TritonLayout(logging.Formatter):
    """``I1121 12:34:56.789012 4242 __main__.py:60] message``: Triton's (and the service's)
    log layout, so the two processes' logs read alike."""

    def format(self, record: logging.LogRecord) -> str:
        letter = {"WARNING": "W", "ERROR": "E", "CRITICAL": "E"}.get(record.levelname, "I")
        stamp = time.strftime("%m%d %H:%M:%S", time.gmtime(record.created))
        micros = int((record.created % 1) * 1_000_000)
        where = f"{record.process} {record.filename}:{record.lineno}]"
        text = f"{letter}{stamp}.{micros:06d} {where} {record.getMessage()}"
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        return text


def main(argv: Sequence[str] | None = None) -> int:
    config = parse_args(argv)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_TritonLayout())
    logging.basicConfig(
        level=logging.DEBUG if config.log_verbose > 0 else logging.INFO, handlers=[handler]
    )
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency; asyncio works too
        return asyncio.run(serve(config))
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(serve(config))


if __name__ == "__main__":
    sys.exit(main())
