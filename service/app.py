"""Composition root: repository -> models -> core -> gRPC frontend, metrics; signals; stop."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import signal
import threading
from collections.abc import Callable

from .cache import ResponseCache
from .config import ServerConfig
from .core.lifecycle import ControlMode, ModelManager
from .core.server import InferenceServer
from .core.status_table import model_table
from .handlers.server import GrpcFrontend
from .statistics import set_observer_factory
from .telemetry.cpu import CpuMetrics
from .telemetry.gpu import GpuMetrics
from .telemetry.logs import LogControl
from .telemetry.metrics import CONTENT_TYPE, MetricsRenderer
from .telemetry.metrics_http import MetricsEndpoint
from .telemetry.metrics_latency import LatencyObserver
from .telemetry.spans import TracingStepRunner
from .telemetry.tracing import Tracing

__all__ = ["serve"]

log = logging.getLogger("service")

#: After SIGTERM closes the listener, calls already sent on open connections (a
#: balancer's connection per request, a gateway's channel) are served this long before
#: grpc's stop, which would cancel them (docs/architecture.md, "Start-up and shutdown").
LAME_DUCK_S = 1.0


async def serve(config: ServerConfig, logs: LogControl | None = None) -> int:
    """Run until SIGTERM/SIGINT; returns the exit code.

    ``logs`` (set up by ``__main__``) makes the LogSettings RPC available.
    """
    # Signals first: a SIGTERM at any moment from here on is a graceful stop.
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    latency = config.metrics.latency
    if config.metrics.enabled and latency.observed:
        # Before any model loads: each ModelStats takes its observer when it is created.
        set_observer_factory(functools.partial(LatencyObserver, latency))
    mode = ControlMode(config.model_control_mode)
    models = ModelManager(config.model_repositories, mode=mode, startup_models=config.load_models)
    cache = ResponseCache(config.cache_size_bytes) if config.cache_size_bytes else None
    core = InferenceServer(
        models, strict_readiness=config.strict_readiness, cache=cache, server_id=config.server_id
    )
    tracing = Tracing(config.trace)
    models.attach_runner(TracingStepRunner(core.step_runner, tracing))
    try:
        await models.start()
    except ValueError as exc:
        log.error("%s", exc)
        await models.unload_all()
        return 1
    log.info("\n%s", model_table(models.index()))
    poller = None
    if mode is ControlMode.POLL:
        poller = asyncio.create_task(models.poll_forever(config.repository_poll_secs))
    metrics = None
    gpu = None
    cpu = None
    if config.metrics.enabled:
        interval_s = config.metrics.interval_ms / 1000
        if config.metrics.gpu:
            gpu = GpuMetrics(interval_s)
            if not await asyncio.to_thread(gpu.start):
                gpu = None
        if config.metrics.cpu:
            cpu = CpuMetrics(interval_s)
            if not await asyncio.to_thread(cpu.start):
                cpu = None
        renderer = MetricsRenderer(
            models.loaded,
            cache_enabled=cache is not None,
            latency=latency,
            extra=_joined([c.render for c in (gpu, cpu) if c is not None]),
        )
        metrics = MetricsEndpoint(renderer.render, CONTENT_TYPE)
    try:
        frontend = GrpcFrontend(core, config, logs=logs, tracing=tracing)
        metrics_port = (
            await metrics.start(config.metrics.address, config.metrics.port) if metrics else 0
        )
        port = await frontend.start()
    except OSError as exc:
        log.error("%s", exc)
        if metrics is not None:
            await metrics.stop()
        for collector in (gpu, cpu):
            if collector is not None:
                collector.stop()
        await models.unload_all()
        return 1
    # Tests and scripts wait for this line (and read the port from it with --grpc-port 0).
    log.info("Started GRPCInferenceService at %s:%d", config.grpc_address, port)
    if metrics is not None:
        log.info("Started Metrics Service at %s:%d", config.metrics.address, metrics_port)
    await stop.wait()

    # Readiness false and the listener closed at once (a balancer moves to another
    # replica); calls already sent on open connections are still served for a moment
    # (LAME_DUCK_S), then every connection gets GOAWAY; in-flight requests (unary and
    # streamed) are answered, open streams end, and the models are unloaded.
    log.info("shutting down: waiting up to %.0fs for in-flight requests", config.exit_timeout_secs)
    deadline = loop.time() + config.exit_timeout_secs
    core.stop_accepting()
    await frontend.set_serving(False)
    if await frontend.close_listener():
        await asyncio.sleep(min(LAME_DUCK_S, config.exit_timeout_secs / 2))
    frontend.begin_stop(max(0.0, deadline - loop.time()))
    await asyncio.sleep(0)  # grpc's stop has begun: GOAWAY is on its way
    log.info("new connections refused; GOAWAY sent on open connections")
    if poller is not None:
        poller.cancel()
    try:
        await asyncio.wait_for(core.drain(), config.exit_timeout_secs)
    except TimeoutError:
        log.warning("exit timeout reached with inferences still in flight")
    frontend.close_streams()
    await frontend.stop(max(0.0, deadline - loop.time()))
    if metrics is not None:
        await metrics.stop()
    for collector in (gpu, cpu):
        if collector is not None:
            collector.stop()
    try:
        await asyncio.wait_for(models.unload_all(), max(1.0, deadline - loop.time()))
    except TimeoutError:
        # An execution still runs in a model's thread; waiting for it would outlast
        # --exit-timeout-secs (interpreter exit joins those threads), so leave now.
        log.warning("exit timeout reached while model executions were still running")
        logging.shutdown()
        os._exit(0)
    await _flush_traces(tracing, max(1.0, deadline - loop.time()))
    log.info("server stopped")
    return 0


def _joined(renders: list[Callable[[], str]]) -> Callable[[], str] | None:
    """One ``extra`` for the renderer from the polled collectors (GPU then CPU, Triton's
    order); None when there is none, so a scrape pays nothing for them."""
    if not renders:
        return None
    return lambda: "".join(render() for render in renders)


async def _flush_traces(tracing: Tracing, seconds: float) -> None:
    """Export the spans still queued, for at most ``seconds``.

    In a daemon thread rather than the loop's executor: an unreachable collector must not
    hold the exit (the executor's threads are joined when the loop closes).
    """
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()

    def finished() -> None:
        if not done.done():
            done.set_result(None)

    def flush() -> None:
        try:
            tracing.shutdown()
        finally:
            with contextlib.suppress(RuntimeError):  # the loop is gone: nobody waits
                loop.call_soon_threadsafe(finished)

    threading.Thread(target=flush, name="trace-flush", daemon=True).start()
    try:
        await asyncio.wait_for(done, seconds)
    except TimeoutError:
        log.warning("trace exporter did not flush within %.1fs; exiting without it", seconds)
