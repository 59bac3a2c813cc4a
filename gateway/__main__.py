"""``python -m gateway``: parse flags, bind the HTTP socket, serve until SIGTERM/SIGINT.

Logs ``Started HTTPService at HOST:PORT`` (Triton's wording) once it accepts requests;
with ``--http-port 0`` that line is how callers learn the port.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
import sys
import time
from collections.abc import Iterator, Sequence

import uvicorn

from .app import GatewayApp
from .config import GatewayConfig, parse_args

log = logging.getLogger("gateway")


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
    """uvicorn's server, logging Triton's start-up line once it accepts requests."""

    def __init__(self, config: uvicorn.Config, sock: socket.socket, target: str) -> None:
        super().__init__(config)
        self._sock = sock
        self._target = target

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
        await super().startup(sockets=sockets)
        if self.started:
            host, port = self._sock.getsockname()[:2]
            log.info("REST gateway in front of the gRPC service at %s", self._target)
            log.info("Started HTTPService at %s:%d", host, port)


async def serve(config: GatewayConfig) -> int:
    """Run uvicorn (httptools) on our own socket; 0 after a clean stop."""
    sock = _bind(config)
    uv_config = uvicorn.Config(
        GatewayApp(config),
        loop="none",
        http="httptools",
        ws="none",
        lifespan="on",
        access_log=config.log_verbose > 0,
        log_level="info" if config.log_verbose > 0 else "warning",
        server_header=False,
        proxy_headers=False,  # no per-request middleware: the gateway trusts no forwarded headers
        timeout_graceful_shutdown=30,
    )
    server = _Server(uv_config, sock, config.grpc_target)
    try:
        await server.serve(sockets=[sock])
    finally:
        sock.close()
    return 0 if server.started else 1


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
