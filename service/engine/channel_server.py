"""The engine's side of the channel: accepts frontend processes, answers their calls, and
broadcasts what every frontend must follow (log settings, tracing on/off, shutdown)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import socket
from collections.abc import Mapping, Sequence
from typing import Any

from ..channel.framing import recv_hello, send_hello
from ..channel.messages import EVENT
from ..channel.slabs import DEFAULT_ARENA_BYTES, Arena, ArenaMap
from ..core.inference_server import InferenceServer, VersionStats
from ..grpc_frontend.inprocess import LocalCore
from ..telemetry.logs import LogControl, LogValue
from ..telemetry.tracing import Tracing
from .connection import FrontendConnection

__all__ = ["EngineServer"]

log = logging.getLogger(__name__)

_HANDSHAKE_SECONDS = 10.0
#: Beyond the exit timeout, for the frontends' reports of their gateways' HTTP stop.
_HTTP_REPORT_MARGIN_S = 3.0


class EngineServer:
    def __init__(
        self,
        address: str,
        core: InferenceServer,
        tracing: Tracing,
        logs: LogControl | None,
        arena_bytes: int = DEFAULT_ARENA_BYTES,
    ) -> None:
        self.address = address
        self._core = LocalCore(core)
        self._tracing = tracing
        self._logs = logs
        self._arena_bytes = arena_bytes
        self.connections: set[FrontendConnection] = set()
        self._listener: socket.socket | None = None
        self._accepting: asyncio.Task[None] | None = None
        self._events: list[tuple[str, Any]] = []  # shutdown events, replayed to latecomers
        self._models_due = False
        core.watch_models(self._models_changed)
        self._indices: dict[FrontendConnection, int] = {}
        #: The stop's HTTP step: the seconds each frontend's gateways left, by index.
        self._http_left: dict[int, float] = {}
        #: Requests in flight the frontends' gateways cut off at the exit timeout.
        self.http_cut = 0
        self._http_changed = asyncio.Event()

    async def start(self) -> None:
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(self.address)
        listener.listen(64)
        listener.setblocking(False)
        self._listener = listener
        self._accepting = asyncio.create_task(self._accept_forever())

    async def _accept_forever(self) -> None:
        assert self._listener is not None
        loop = asyncio.get_running_loop()
        while True:
            sock, _ = await loop.sock_accept(self._listener)
            try:
                await self._welcome(sock)
            except (OSError, ConnectionError, TimeoutError) as exc:
                log.warning("a frontend failed its handshake: %s", exc)
                sock.close()

    async def _welcome(self, sock: socket.socket) -> None:
        sock.setblocking(True)
        sock.settimeout(_HANDSHAKE_SECONDS)
        hello, fds = await asyncio.to_thread(recv_hello, sock, 1)
        requests = ArenaMap(fds[0], hello["arena_bytes"])
        responses = Arena(self._arena_bytes, "engine-responses")
        state = {
            "arena_bytes": self._arena_bytes,
            "logs": self._log_snapshot(),
            "tracing": self._tracing.active,
        }
        await asyncio.to_thread(send_hello, sock, state, [responses.fd])
        sock.setblocking(False)
        name = f"{hello['index']} (pid {hello['pid']})"
        connection = FrontendConnection(
            name, self._core, self._tracing, self._call, requests, responses, self._closed
        )
        loop = asyncio.get_running_loop()
        await loop.connect_accepted_socket(lambda: connection.channel, sock)
        self.connections.add(connection)
        # Taken now, not in the handshake: a change during the handshake is in it.
        connection.send((EVENT, "models", self._core.server.models_snapshot()))
        self._indices[connection] = int(hello["index"])
        for kind, value in self._events:
            connection.send((EVENT, kind, value))
        log.debug("frontend %s connected", name, extra={"verbose": 1})

    def _closed(self, connection: FrontendConnection) -> None:
        self.connections.discard(connection)
        self._indices.pop(connection, None)
        self._http_changed.set()
        # Its requests still in the table (cancelled now): none after a graceful stop.
        log.debug(
            "frontend %s disconnected, %d requests in flight",
            connection.name,
            connection.inflight,
            extra={"verbose": 1},
        )

    def _models_changed(self) -> None:
        """The loaded versions changed: every frontend gets the new snapshot, once for
        whatever changed in this loop iteration (a start-up loads many at once)."""
        if not self._models_due:
            self._models_due = True
            asyncio.get_running_loop().call_soon(self._send_models)

    def _send_models(self) -> None:
        self._models_due = False
        if self.connections:
            self.broadcast("models", self._core.server.models_snapshot())

    def broadcast(self, kind: str, value: Any = None, *, replay: bool = False) -> None:
        """Send an event to every frontend; ``replay``: also to those that connect later."""
        if replay:
            self._events.append((kind, value))
        for connection in self.connections:
            connection.send((EVENT, kind, value))

    async def stop_http(self, seconds: float) -> float:
        """Every frontend has its gateways stop their HTTP endpoints (``http_stop``) and
        reports the exit timeout they left and the requests they cut off
        (``http_stopped``, summed in ``http_cut``); returns the least left, waiting
        at most ``seconds`` and a margin (a frontend that never reports: what is left
        by the clock)."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        deadline = started + seconds + _HTTP_REPORT_MARGIN_S
        self.broadcast("http_stop", seconds, replay=True)
        while True:
            waiting = set(self._indices.values()) - set(self._http_left)
            if not waiting or loop.time() >= deadline:
                break
            self._http_changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._http_changed.wait(), deadline - loop.time())
        lefts = list(self._http_left.values())
        if waiting:
            lefts.append(max(0.0, seconds - int(loop.time() - started)))
        return min(lefts, default=seconds)

    def _http_stopped(self, index: int, left: float, cut: int = 0) -> None:
        self._http_left[index] = min(left, self._http_left.get(index, left))
        self.http_cut += cut
        self._http_changed.set()

    async def wait_disconnected(self, seconds: float) -> None:
        pending = [c.closed for c in self.connections]
        if pending:
            await asyncio.wait(pending, timeout=seconds)

    async def close(self) -> None:
        if self._accepting is not None:
            self._accepting.cancel()
        if self._listener is not None:
            self._listener.close()
        for connection in list(self.connections):
            connection.channel.close()

    # --- control-plane calls -------------------------------------------------------------

    def _call(self, name: str, args: tuple[Any, ...]) -> Any:
        """A frontend's call by name: the settings owned here, or the core API."""
        if name == "log_settings":
            return self._update_logs(*args)
        if name == "trace_settings":
            return self._update_tracing(*args)
        if name == "http_stopped":
            return self._http_stopped(*args)
        if name.startswith("_"):
            raise AttributeError(name)
        result = getattr(self._core, name)(*args)
        if name == "model_statistics":
            return self._statistics(result)
        return result

    @staticmethod
    async def _statistics(pending: Any) -> list[VersionStats]:
        """Counters only: the latency observer (locks, windows) stays here."""
        entries: list[VersionStats] = await pending
        return [
            VersionStats(e.name, e.version, dataclasses.replace(e.stats, observer=None))
            for e in entries
        ]

    def _log_snapshot(self) -> dict[str, LogValue] | None:
        return None if self._logs is None else self._logs.snapshot()

    def _update_logs(self, changes: Mapping[str, LogValue | None]) -> dict[str, LogValue]:
        assert self._logs is not None  # frontends offer LogSettings only when we have logs
        snapshot = self._logs.update(changes)
        self.broadcast("logs", snapshot)
        return snapshot

    def _update_tracing(
        self, changes: Mapping[str, Sequence[str]], model: str
    ) -> dict[str, list[str]]:
        settings = self._tracing.update(changes, model)
        self.broadcast("tracing", self._tracing.active)
        return settings
