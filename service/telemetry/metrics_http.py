"""The ``/metrics`` endpoint: a minimal HTTP/1.1 server on the event loop.

In-process on the loop rather than prometheus_client's server thread: a scrape then reads
``ModelStats`` on the thread that writes them (no torn reads, no "dict changed size during
iteration" from a thread), and a scrape of a few models costs tens of microseconds of loop
time (docs/decisions/014-operations.md). One request per connection; anything but
``GET /metrics`` (or ``HEAD``) is answered 404 / 405.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
from collections.abc import Callable

__all__ = ["MetricsEndpoint"]

log = logging.getLogger(__name__)

_READ_TIMEOUT_S = 10.0
_MAX_HEADER_LINES = 100
_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed"}


class MetricsEndpoint:
    def __init__(self, render: Callable[[], bytes], content_type: str) -> None:
        self._render = render
        self._content_type = content_type
        self._server: asyncio.Server | None = None
        self._open: set[asyncio.StreamWriter] = set()

    async def start(self, address: str, port: int) -> int:
        """Bind and serve; returns the bound port (useful with port 0). A port in use
        raises OSError with Triton's one-line message."""
        try:
            self._server = await asyncio.start_server(
                self._handle, address, port, reuse_address=True, limit=16 * 1024
            )
        except OSError as exc:
            raise OSError(
                f"failed to start Metrics service: Socket '{address}:{port}' already in use"
                if exc.errno == errno.EADDRINUSE
                else f"failed to start Metrics service at {address}:{port}: {exc.strerror or exc}"
            ) from None
        return int(self._server.sockets[0].getsockname()[1])

    async def stop(self) -> None:
        """Stop listening and drop open connections (wait_closed waits for them on 3.12+)."""
        if self._server is not None:
            self._server.close()
            for writer in list(self._open):
                writer.close()
            await self._server.wait_closed()
            self._server = None

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._open.add(writer)
        try:
            status, body, head_only = await asyncio.wait_for(self._respond(reader), _READ_TIMEOUT_S)
            content_type = self._content_type if status == 200 else "text/plain"
            head = (
                f"HTTP/1.1 {status} {_REASONS[status]}\r\nContent-Type: {content_type}\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
            )
            writer.write(head.encode("latin-1") + (b"" if head_only else body))
            await writer.drain()
        except (TimeoutError, ConnectionError, ValueError, asyncio.IncompleteReadError):
            pass  # a slow, broken or oversized request: just close
        except Exception:
            log.exception("metrics endpoint failed")
        finally:
            self._open.discard(writer)
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    async def _respond(self, reader: asyncio.StreamReader) -> tuple[int, bytes, bool]:
        """(status, body, whether to send the headers only)."""
        parts = (await reader.readline()).decode("latin-1").split()
        for _ in range(_MAX_HEADER_LINES):
            if (await reader.readline()) in (b"\r\n", b"\n", b""):
                break
        else:
            return 400, b"too many header lines\n", False
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            return 400, b"bad request\n", False
        method, path = parts[0], parts[1].split("?", 1)[0]
        if path != "/metrics":
            return 404, b"not found\n", False
        if method not in ("GET", "HEAD"):
            return 405, b"method not allowed\n", False
        return 200, self._render(), method == "HEAD"
