"""A frontend process: the gRPC server (servicer, health, reflection, TLS, restricted
protocols) over an ``EngineClient``, on the port every frontend shares (SO_REUSEPORT).

It follows the engine: log settings and tracing on/off as broadcast, its REST gateways
told to stop their HTTP endpoints (``http_stop``, reported back), readiness off and
its listener closed when the engine starts stopping, streams closed once it has drained,
and the process ends once their answers have gone out, without grpc's stop
(``exiting.py``). Losing the engine ends the process with an error (its callers got
UNAVAILABLE).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import signal
import socket
import sys
from multiprocessing.connection import Connection
from typing import Any

from wire.heap import reuse_freed_pages

from .. import loop
from ..admission import Admission
from ..collector import settle_heap
from ..config import ServerConfig
from ..exiting import exit_timeout_expired, leave
from ..grpc_frontend.aio_server import GrpcFrontend
from ..telemetry.logs import LogControl
from .client import EngineClient, EngineLost, RemoteLogs, RemoteTracing

__all__ = ["run_frontend"]

log = logging.getLogger("service")

_LOST_ENGINE_WAIT_S = 1.0  # for the UNAVAILABLE answers of the calls the engine dropped


def run_frontend(
    config: ServerConfig,
    index: int,
    address: str,
    port: int,
    local: socket.socket | None,
    admission: Admission,
    parent: Connection,
) -> None:
    """Process entry point (spawned by the supervisor). ``admission``: where this
    frontend's count of gateways holding HTTP connections goes (``admission.py``)."""
    reuse_freed_pages()
    # Ctrl-C reaches the whole process group, and a service manager may signal every
    # process of the group: the engine leads the stop, a frontend exits when told. New
    # requests need not wait for that: the supervisor's handler refuses them in the
    # engine's core (admission.py).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        logs = LogControl(config.log)
    except OSError as exc:
        print(f"error: cannot open log file: {exc}", file=sys.stderr)
        parent.send(("failed", str(exc)))
        sys.exit(1)
    try:
        code = loop.run(_serve(config, index, address, port, local, admission, parent, logs))
    finally:
        logs.close()
    sys.exit(code)


def _follow_logs(logs: LogControl, snapshot: dict[str, Any] | None) -> None:
    if snapshot:
        logs.update({k: v for k, v in snapshot.items() if k != "log_file"})


async def _stopping(frontend: GrpcFrontend) -> None:
    """The engine's stop began: not serving, and the listener closed at once (this
    frontend's; the supervisor's holder never listens), so a balancer moves on."""
    await frontend.set_serving(False)
    await frontend.close_listener()


async def _stop_http(
    frontend: GrpcFrontend, client: EngineClient, index: int, seconds: float
) -> None:
    """The stop's first step: this frontend's gateways stop their HTTP endpoints; the
    engine learns the exit timeout they left and the requests they cut off (it waits for
    every frontend's report)."""
    left = await frontend.stop_http(seconds)
    with contextlib.suppress(EngineLost, OSError):
        await client.call("http_stopped", index, left, frontend.gateways.cut)


async def _serve(
    config: ServerConfig,
    index: int,
    address: str,
    port: int,
    local: socket.socket | None,
    admission: Admission,
    parent: Connection,
    logs: LogControl,
) -> int:
    client = EngineClient(address, index)
    try:
        await client.connect()
    except OSError as exc:
        log.error("frontend %d: cannot reach the engine: %s", index, exc)
        parent.send(("failed", str(exc)))
        return 1
    _follow_logs(logs, client.state.get("logs"))
    tracing = RemoteTracing(client, bool(client.state.get("tracing")))
    try:
        frontend = GrpcFrontend(
            client,
            dataclasses.replace(config, grpc_port=port),
            logs=RemoteLogs(client) if client.state.get("logs") is not None else None,
            tracing=tracing,
            reuse_port=True,
            quiet=index != 1,  # start-up notes once, from the first frontend
            local_socket=local,
        )
        frontend.gateways.on_busy = functools.partial(admission.set_busy, index - 1)
        admission.set_busy(index - 1, 0)
        await frontend.start()
    except OSError as exc:
        log.error("%s", exc)
        parent.send(("failed", str(exc)))
        return 1
    loop = asyncio.get_running_loop()
    drained: asyncio.Future[float] = loop.create_future()
    tasks: set[asyncio.Task[None]] = set()

    def on_event(kind: str, value: Any) -> None:
        if kind == "logs":
            _follow_logs(logs, value)
        elif kind == "tracing":
            tracing.active = bool(value)
        elif kind == "http_stop":
            task = loop.create_task(_stop_http(frontend, client, index, float(value)))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        elif kind == "stopping":
            task = loop.create_task(_stopping(frontend))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        elif kind == "drained" and not drained.done():
            drained.set_result(float(value))

    client.on_event = on_event
    settle_heap()
    parent.send(("serving", port))
    assert client.lost is not None
    await asyncio.wait((drained, client.lost), return_when=asyncio.FIRST_COMPLETED)
    if not drained.done():
        log.error("frontend %d: lost the engine process: stopping", index)
        frontend.close_streams()
        await frontend.finish(_LOST_ENGINE_WAIT_S)
        leave(1)
    frontend.close_streams()
    finishing = loop.time()
    sent = await frontend.finish(drained.result())
    client.close()
    if not sent:
        exit_timeout_expired()
    # GOAWAY where it cancels nothing (goaway.py); grpc's stop only then: see exiting.py.
    await frontend.goaway(max(0.0, drained.result() - (loop.time() - finishing)))
    leave(0)
