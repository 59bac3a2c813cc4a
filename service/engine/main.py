"""The engine process: runtime (models, core, metrics, tracing) behind the channel.

Started by the supervisor (``supervisor.py``), which it tells when it is ready. Its core
reads the refusal flags the supervisor shares (``admission.py``): with no REST gateway
holding HTTP connections, the supervisor's signal handler raised them already, and new
requests are refused from the signal on. SIGTERM
from the supervisor starts the graceful stop, which the engine leads: first the REST
gateways that follow the frontends stop their HTTP endpoints (Triton stops its HTTP
endpoint before its core; ``grpc_frontend/gateway_link.py``), then readiness false,
the frontends' listeners closed, new stream requests refused at once and new unary ones
after the lame duck (the requests of sequences in progress still served), in-flight
requests and those sequences drained, then every frontend told to close its streams and
leave, then models unloaded. With --exit-timeout-secs spent first, the engine logs
Triton's line and exits 1 at once (``exiting.exit_timeout_expired``). The supervisor's
pipe closing (the parent was killed) ends the engine at once, with exit code 1.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from multiprocessing.connection import Connection

from wire.heap import reuse_freed_pages

from .. import loop
from ..admission import Admission
from ..collector import settle_heap
from ..config import ServerConfig
from ..exiting import exit_timeout_expired, leave
from ..runtime import Runtime
from ..telemetry.logs import LogControl
from .channel_server import EngineServer

__all__ = ["SWITCH_INTERVAL_ENV", "run_engine", "set_switch_interval"]

log = logging.getLogger("service")

#: The engine interpreter's switch interval in µs (unset: CPython's 5 ms). Issue 25 asks a
#: many-core machine to try 0.2 ms, so that instance threads wait less for the loop's GIL;
#: 2 cores showed no gain, so loadtest/many_cores.sh sets it for its comparison only.
SWITCH_INTERVAL_ENV = "SERVICE_ENGINE_SWITCH_INTERVAL_US"


def set_switch_interval(value: str) -> float | None:
    """Apply ``value`` (µs) as the switch interval; the seconds set, or None (unset, or
    not a positive whole number: said in the log)."""
    if not value:
        return None
    if not value.isdigit() or int(value) == 0:
        log.warning(
            "%s=%r ignored: not a positive whole number of microseconds", SWITCH_INTERVAL_ENV, value
        )
        return None
    sys.setswitchinterval(int(value) / 1e6)
    log.info("engine switch interval %s us", value)
    return sys.getswitchinterval()


def run_engine(
    config: ServerConfig, address: str, admission: Admission, parent: Connection
) -> None:
    """Process entry point (spawned). ``admission``: the core's refusal flags, which the
    supervisor may raise in its signal handler (``admission.py``)."""
    reuse_freed_pages()
    try:
        logs = LogControl(config.log)
    except OSError as exc:
        print(f"error: cannot open log file: {exc}", file=sys.stderr)
        parent.send(("failed", 0))
        sys.exit(1)
    try:
        code = loop.run(_serve(config, address, admission, parent, logs))
    finally:
        logs.close()
    # Models are unloaded and spans flushed within --exit-timeout-secs: an exporter still
    # retrying in its thread, or the tracing SDK's exit hook waiting for it, must not hold
    # the exit longer.
    sys.stderr.flush()
    os._exit(code)


async def _serve(
    config: ServerConfig,
    address: str,
    admission: Admission,
    parent: Connection,
    logs: LogControl,
) -> int:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, lambda: None)  # the supervisor decides

    def parent_readable() -> None:
        try:
            parent.recv()
        except (EOFError, OSError):
            # The supervisor was killed: so is the server. No graceful stop (it would
            # wait for the lame duck and the sequences in progress); the frontends lose
            # the engine and leave too, their callers get UNAVAILABLE.
            log.error("the supervisor process is gone: stopping the engine")
            leave(1)

    # ONNX Runtime instances in worker processes: measured slower on 2 cores (decision 030),
    # so only on request until the hop is cheaper.
    isolate = os.environ.get("SERVICE_INSTANCE_WORKERS") == "1"
    runtime = Runtime(config, isolate=isolate, admission=admission)
    set_switch_interval(os.environ.get(SWITCH_INTERVAL_ENV, ""))
    if not await runtime.start_models():
        parent.send(("failed", 0))
        return 1
    try:
        metrics_port = await runtime.start_metrics()
    except OSError as exc:
        log.error("%s", exc)
        await runtime.stop_metrics()
        await runtime.models.unload_all()
        parent.send(("failed", 0))
        return 1
    server = EngineServer(address, runtime.core, runtime.tracing, logs)
    await server.start()
    settle_heap()
    parent.send(("ready", metrics_port))
    loop.add_reader(parent.fileno(), parent_readable)
    await stop.wait()

    # The gateways' HTTP connections first (each frontend's gateways), as Triton stops its
    # HTTP endpoint before the core; then the supervisor closes the local socket.
    left = await server.stop_http(config.exit_timeout_secs)
    parent.send(("stopping", 0))
    deadline = loop.time() + left
    runtime.stop_accepting()
    server.broadcast("stopping", replay=True)  # frontends: not serving, listeners closed
    await runtime.lame_duck()
    # Requests the gateways cut off at the exit timeout are work left (app.py).
    if server.http_cut or not await runtime.drain(max(0.0, deadline - loop.time())):
        exit_timeout_expired()  # the frontends lose the engine and leave too
    server.broadcast("drained", max(0.0, deadline - loop.time()), replay=True)
    await server.wait_disconnected(max(0.0, deadline - loop.time()) + 1.0)
    await server.close()
    await runtime.stop_metrics()
    if not await runtime.unload(max(0.0, deadline - loop.time())):
        exit_timeout_expired()
    await runtime.flush_traces(max(1.0, deadline - loop.time()))
    return 0
