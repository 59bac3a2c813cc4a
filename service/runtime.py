"""What the engine owns, in either process layout: repository, models, core, tracing,
metrics endpoint and pollers, and their start and stop in the right order."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import sys
import threading
from collections.abc import Callable

from .admission import Admission
from .backends import backend_config
from .backends.python import bls
from .cache import ResponseCache
from .config import ServerConfig
from .core.bls_core import BlsCore
from .core.inference_server import InferenceServer
from .core.lifecycle import ControlMode, ModelManager
from .core.startup_table import model_table
from .repository import layout
from .repository.limits import ConfigLimits
from .scheduling.rate_limiter import RateLimiter
from .statistics import set_observer_factory
from .stop_countdown import busy_versions, live_versions, log_in_flight, log_live
from .telemetry.cpu import CpuMetrics
from .telemetry.custom_metrics import CUSTOM_METRICS
from .telemetry.gpu import GpuMetrics
from .telemetry.metrics import CONTENT_TYPE, MetricsRenderer
from .telemetry.metrics_http import MetricsEndpoint
from .telemetry.metrics_latency import LatencyObserver
from .telemetry.spans import TracingStepRunner
from .telemetry.tracing import Tracing

__all__ = ["Runtime"]

log = logging.getLogger("service")


class Runtime:
    """Built from the config; ``start`` loads the models, ``stop_*`` take it down."""

    def __init__(
        self, config: ServerConfig, *, isolate: bool = False, admission: Admission | None = None
    ) -> None:
        """``isolate``: ONNX Runtime instances in worker processes (only the engine of the
        split layout asks, with ``SERVICE_INSTANCE_WORKERS=1``: decision 030);
        ``admission``: the core's refusal flags, shared with the process that takes the
        stop signal (``admission.py``)."""
        self.config = config
        for note in config.notes:  # Triton's flags that change nothing here, once each
            log.warning("%s", note)
        # Before any model loads: the loads read these (backend settings, config name).
        backend_config.configure(config.backends)
        layout.set_config_name(config.model_config_name)
        latency = config.metrics.latency
        if config.metrics.enabled and latency.observed:
            # Before any model loads: each ModelStats takes its observer when it is created.
            set_observer_factory(functools.partial(LatencyObserver, latency))
        self.mode = ControlMode(config.model_control_mode)
        self.models = ModelManager(
            config.model_repositories,
            mode=self.mode,
            startup_models=config.load_models,
            limits=ConfigLimits(max_instances=config.max_instances_per_model),
            isolate=isolate,
            load_threads=config.model_load_thread_count,
            load_retries=config.model_load_retry_count,
            limiter=RateLimiter(config.rate_limit_resources) if config.rate_limit else None,
            namespacing=config.model_namespacing,
        )
        self.cache = ResponseCache(config.cache_size_bytes) if config.cache_size_bytes else None
        self.core = InferenceServer(
            self.models,
            strict_readiness=config.strict_readiness,
            cache=self.cache,
            server_id=config.server_id,
            admission=admission,
        )
        self.tracing = Tracing(config.trace)
        self.steps = TracingStepRunner(self.core.step_runner, self.tracing)
        self.models.attach_runner(self.steps)
        self._poller: asyncio.Task[None] | None = None
        self._metrics: MetricsEndpoint | None = None
        self._collectors: list[GpuMetrics | CpuMetrics] = []

    async def start_models(self) -> bool:
        """Load what the control mode says; False (logged) when the start must fail."""
        # Python models' BLS requests run on this loop, from their first execute.
        core = BlsCore(self.core, self.core.step_runner, self.tracing)
        bls.install(core, asyncio.get_running_loop())
        try:
            await self.models.start()
        except ValueError as exc:
            log.error("%s", exc)
            await self.models.unload_all()
            return False
        log.info("\n%s", model_table(self.models.index(), self.models.versionless()))
        if not self.models.all_ready():
            # Triton's start-up rule: every model loaded at start must be ready; its
            # --exit-on-error (default true) makes that the server's failure to start.
            if self.config.exit_on_error:
                print(
                    "error: creating server: Internal - failed to load all models", file=sys.stderr
                )
                await self.models.unload_all()
                return False
            log.error("Internal: failed to load all models")
        if self.mode is ControlMode.POLL:
            self._poller = asyncio.create_task(
                self.models.poll_forever(self.config.repository_poll_secs)
            )
        return True

    async def start_metrics(self) -> int:
        """Bind the metrics endpoint (when enabled): its port, 0 when off. OSError when
        the port cannot be bound."""
        metrics = self.config.metrics
        if not metrics.enabled:
            return 0
        interval_s = metrics.interval_ms / 1000
        if metrics.gpu:
            gpu = GpuMetrics(interval_s)
            if await asyncio.to_thread(gpu.start):
                self._collectors.append(gpu)
        if metrics.cpu:
            cpu = CpuMetrics(interval_s)
            if await asyncio.to_thread(cpu.start):
                self._collectors.append(cpu)
        renderer = MetricsRenderer(
            self.models.loaded,
            cache_enabled=self.cache is not None,
            latency=metrics.latency,
            extra=_joined([*(c.render for c in self._collectors), CUSTOM_METRICS.render]),
        )
        self._metrics = MetricsEndpoint(renderer.render, CONTENT_TYPE)
        return await self._metrics.start(metrics.address, metrics.port)

    def stop_accepting(self) -> None:
        """Readiness false and new stream requests refused; new unary ones too unless a
        lame duck is set (``lame_duck``); repository polling ends. Triton's core logs
        its line here, once the HTTP connections have gone (``stop_http``). Without any,
        the refusals began at the signal already (``admission.py``)."""
        log.info("Waiting for in-flight requests to complete.")
        self.core.stop_accepting()
        if self.config.lame_duck_s == 0:
            self.core.refuse_new()  # before the listener closes: nothing slips in
        if self._poller is not None:
            self._poller.cancel()

    async def lame_duck(self) -> None:
        """With --lame-duck-secs (at most half of --exit-timeout-secs): serve the unary
        calls still arriving on open connections that long (the listener is closed by
        now: a balancer's kept connection may carry one it had no way to send elsewhere),
        then refuse every new inference but those of sequences in progress, as Triton
        does from the signal on (its default, 0)."""
        seconds = self.config.lame_duck_s
        if seconds:
            await asyncio.sleep(seconds)
            self.core.refuse_new()
        log.info("lame duck over (%gs): new inference requests are refused", seconds)

    async def drain(self, seconds: float) -> bool:
        """Wait up to ``seconds`` for the inferences in flight and the sequences in
        progress to end; False when some work is left (the exit timeout is spent).
        Logs Triton's countdown once a second meanwhile (``stop_countdown.py``)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        logged_busy = False
        while True:
            busy = busy_versions(self.models.entries())
            log_in_flight(deadline - loop.time(), busy)
            logged_busy = logged_busy or bool(busy)
            if await self.core.drain(min(1.0, max(0.0, deadline - loop.time()))):
                if logged_busy:  # as Triton's next line reads, once they are done
                    log_in_flight(deadline - loop.time(), [])
                return True
            if loop.time() >= deadline:
                return False

    async def stop_metrics(self) -> None:
        if self._metrics is not None:
            await self._metrics.stop()
        for collector in self._collectors:
            collector.stop()

    async def unload(self, seconds: float) -> bool:
        """Unload every model; False when one is still unloading after ``seconds`` (the
        caller leaves at once: see ``exiting.exit_timeout_expired``), as in Triton, whose
        core gives the unloads what is left of the exit timeout (none when the HTTP
        connections spent it). Logs Triton's countdown once a second meanwhile."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        log.info("All models are stopped, unloading models")
        unloading = asyncio.create_task(self.models.unload_all())
        while True:
            done = unloading.done()
            log_live(deadline - loop.time(), 0 if done else live_versions(self.models.entries()))
            if done:
                unloading.result()
                return True
            if loop.time() >= deadline:
                return False
            await asyncio.wait({unloading}, timeout=min(1.0, deadline - loop.time()))

    async def flush_traces(self, seconds: float) -> None:
        """Export the spans still queued, for at most ``seconds``.

        In a daemon thread rather than the loop's executor: an unreachable collector must
        not hold the exit (the executor's threads are joined when the loop closes).
        """
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()

        def finished() -> None:
            if not done.done():
                done.set_result(None)

        def flush() -> None:
            try:
                self.tracing.shutdown()
            finally:
                with contextlib.suppress(RuntimeError):  # the loop is gone: nobody waits
                    loop.call_soon_threadsafe(finished)

        threading.Thread(target=flush, name="trace-flush", daemon=True).start()
        try:
            await asyncio.wait_for(done, seconds)
        except TimeoutError:
            log.warning("trace exporter did not flush within %.1fs; exiting without it", seconds)


def _joined(renders: list[Callable[[], str]]) -> Callable[[], str] | None:
    """One ``extra`` for the renderer from the polled collectors (GPU then CPU, Triton's
    order); None when there is none, so a scrape pays nothing for them."""
    if not renders:
        return None
    return lambda: "".join(render() for render in renders)
