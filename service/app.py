"""Composition root: repository -> models -> core -> gRPC frontend; signals; graceful stop."""

from __future__ import annotations

import asyncio
import logging
import signal

from .cache import ResponseCache
from .config import ServerConfig
from .core.lifecycle import ControlMode, ModelManager
from .core.server import InferenceServer
from .handlers.server import GrpcFrontend

__all__ = ["serve"]

log = logging.getLogger("service")


async def serve(config: ServerConfig) -> int:
    # Signals first: a SIGTERM at any moment from here on is a graceful stop.
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    mode = ControlMode(config.model_control_mode)
    models = ModelManager(config.model_repositories, mode=mode, startup_models=config.load_models)
    cache = ResponseCache(config.cache_size_bytes) if config.cache_size_bytes else None
    core = InferenceServer(models, strict_readiness=config.strict_readiness, cache=cache)
    models.attach_runner(core)
    try:
        await models.start()
    except ValueError as exc:
        log.error("%s", exc)
        await models.unload_all()
        return 1
    poller = None
    if mode is ControlMode.POLL:
        poller = asyncio.create_task(models.poll_forever(config.repository_poll_secs))
    frontend = GrpcFrontend(core, config)
    try:
        port = await frontend.start()
    except OSError as exc:
        log.error("%s", exc)
        await models.unload_all()
        return 1
    # Tests and scripts wait for this line (and read the port from it with --grpc-port 0).
    log.info("Started GRPCInferenceService at %s:%d", config.grpc_address, port)
    await stop.wait()

    # Readiness false and new inferences refused at once, while the endpoint stays up so
    # health checks and in-flight requests are answered; then the endpoint closes.
    log.info("shutting down: waiting up to %.0fs for in-flight requests", config.exit_timeout_secs)
    deadline = loop.time() + config.exit_timeout_secs
    core.stop_accepting()
    await frontend.set_serving(False)
    if poller is not None:
        poller.cancel()
    try:
        await asyncio.wait_for(core.drain(), config.exit_timeout_secs)
    except TimeoutError:
        log.warning("exit timeout reached with inferences still in flight")
    await frontend.stop(max(0.0, deadline - loop.time()))
    await models.unload_all()
    log.info("server stopped")
    return 0
