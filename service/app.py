"""Composition root: one process (``--frontends 0``) or a supervisor over an engine and
frontend processes; signals; graceful stop."""

from __future__ import annotations

import asyncio
import functools
import logging
import signal

from .admission import Admission
from .collector import settle_heap
from .config import ServerConfig
from .exiting import exit_timeout_expired, leave
from .grpc_frontend.aio_server import GrpcFrontend
from .grpc_frontend.inprocess import LocalCore, LocalLogs, LocalTracing
from .runtime import Runtime
from .telemetry.logs import LogControl

__all__ = ["serve"]

log = logging.getLogger("service")


async def serve(config: ServerConfig, logs: LogControl | None = None) -> int:
    """Run everything in this process until SIGTERM/SIGINT; returns the exit code.

    ``logs`` (set up by ``__main__``) makes the LogSettings RPC available.
    """
    # Signals first: a SIGTERM at any moment from here on is a graceful stop. With no REST
    # gateway holding HTTP connections, new requests are refused from the signal on, as
    # Triton refuses them once its handler has run (admission.py); a second signal
    # changes nothing, as in Triton.
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    admission = Admission()

    def signalled() -> None:
        if not stop.is_set():
            admission.signalled(lame_duck=config.lame_duck_s > 0)
            stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, signalled)
    runtime = Runtime(config, admission=admission)
    if not await runtime.start_models():
        return 1
    try:
        frontend = GrpcFrontend(
            LocalCore(runtime.core),
            config,
            logs=LocalLogs(logs) if logs is not None else None,
            tracing=LocalTracing(runtime.tracing),
        )
        frontend.gateways.on_busy = functools.partial(admission.set_busy, 0)
        metrics_port = await runtime.start_metrics()
        port = await frontend.start()
    except OSError as exc:
        log.error("%s", exc)
        await runtime.stop_metrics()
        await runtime.models.unload_all()
        return 1
    settle_heap()
    # Tests and scripts wait for this line (and read the port from it with --grpc-port 0).
    log.info("Started GRPCInferenceService at %s:%d", config.grpc_address, port)
    if config.metrics.enabled:
        log.info("Started Metrics Service at %s:%d", config.metrics.address, metrics_port)
    await stop.wait()

    # First the REST gateways' HTTP connections, as Triton stops its HTTP endpoint first:
    # they are served on, with everything else as before the signal, until none is left
    # or the exit timeout is spent; the core's stop gets what is left of it.
    log.info("shutting down: waiting up to %.0fs for in-flight requests", config.exit_timeout_secs)
    left = await frontend.stop_http(config.exit_timeout_secs)
    # Readiness false and the listener closed at once (a balancer moves to another
    # replica; new requests on open streams are refused), unary calls still sent on open
    # connections served for the lame duck, then refused too (but those of sequences in
    # progress), as Triton refuses them while it stops. In-flight requests (unary and
    # streamed) and sequences in progress are drained, open streams end, the models are
    # unloaded, and the process ends with the endpoint still up (exiting.leave): its
    # connections close with it, and nobody gets grpc's CANCELLED.
    deadline = loop.time() + left
    runtime.stop_accepting()
    await frontend.set_serving(False)
    await frontend.close_listener()
    await runtime.lame_duck()
    # Requests a gateway cut off when the exit timeout was spent on its connections are
    # work left at the exit timeout, as they would be in Triton's core: exit code 1.
    cut = frontend.gateways.cut
    if cut or not await runtime.drain(max(0.0, deadline - loop.time())):
        exit_timeout_expired()
    frontend.close_streams()
    if not await frontend.finish(max(0.0, deadline - loop.time())):
        exit_timeout_expired()
    # GOAWAY on each connection, as Triton's gRPC endpoint stops, where it cancels nothing.
    await frontend.goaway(max(0.0, deadline - loop.time()))
    await runtime.stop_metrics()
    if not await runtime.unload(max(0.0, deadline - loop.time())):
        exit_timeout_expired()
    await runtime.flush_traces(max(1.0, deadline - loop.time()))
    log.info("server stopped")
    leave(0)
