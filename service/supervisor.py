"""The process the user starts with ``--frontends N``: an engine and N frontend processes.

It creates no gRPC object (children are spawned, never forked, so grpc's threads are
never copied). It reserves the gRPC port (``--grpc-port 0`` picks it once, here), starts
the engine and waits until its models are loaded, then starts the frontends and logs the
start-up lines once every one is serving. A frontend that dies is replaced (its callers
lost only their own requests); the engine dying stops the server with exit code 1.
SIGTERM/SIGINT hand the graceful stop to the engine, which leads the frontends through it;
but first, in the handler itself, new requests are refused when no REST gateway holds
HTTP connections (``admission.py``): the engine's core reads that flag at every
admission, so the refusals begin before the engine or any frontend has woken.
"""

from __future__ import annotations

import errno
import logging
import multiprocessing
import os
import secrets
import signal
import socket
import time
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from typing import Any

from wire.heap import huge_pages_for_children

from .admission import Admission
from .config import ServerConfig
from .engine.main import run_engine
from .frontend.main import run_frontend
from .grpc_frontend.local_rpc import bind_local_socket, unlink_quietly

__all__ = ["supervise"]

log = logging.getLogger("service")

_RESTART_PAUSE = 1.0  # seconds before replacing a frontend that died before serving
_STOP_MARGIN = 15.0  # beyond --exit-timeout-secs, before children are killed


def _describe(code: int | None) -> str:
    if code is None:
        return "no exit code"
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"


def reserve_port(address: str, port: int) -> tuple[int, socket.socket]:
    """Check that the port is free (no SO_REUSEPORT: a server already there is found),
    then hold it with SO_REUSEPORT, which every frontend also sets. The holder never
    listens, so the kernel gives it no connection."""
    host = address.strip("[]")  # "[::]", as grpc takes an IPv6 address, binds "::"
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:  # Triton's one line (grpc_frontend/aio_server.py)
                raise OSError(
                    f"failed to start GRPC service: Socket '{address}:{port}' already in use"
                ) from None
            raise OSError(f"unable to bind gRPC endpoint {address}:{port}: {exc}") from exc
        port = probe.getsockname()[1]
    holder = socket.socket(family, socket.SOCK_STREAM)
    holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        holder.bind((host, port))
    except OSError as exc:
        holder.close()
        raise OSError(f"unable to bind gRPC endpoint {address}:{port}: {exc}") from exc
    return port, holder


_FAILED = "failed"


def _report(conn: Connection) -> tuple[str, Any]:
    """A child's next report, ``(kind, value)``; one that died before sending it reports
    ``failed`` (EOF on its pipe)."""
    try:
        kind, value = conn.recv()
    except EOFError:
        return _FAILED, None
    return kind, value


class _Frontend:
    def __init__(self, index: int, process: BaseProcess, conn: Connection) -> None:
        self.index = index
        self.process = process
        self.conn = conn
        self.serving = False
        self.started = time.monotonic()


class Supervisor:
    def __init__(self, config: ServerConfig) -> None:
        self._config = config
        self._ctx = multiprocessing.get_context("spawn")
        self._address = f"\0service-engine-{os.getpid()}-{secrets.token_hex(4)}"
        self._signals: list[int] = []
        #: The refusal flags and the gateways' counts, shared with every child (one
        #: count per frontend index, 1..N, at slot index - 1).
        self._admission = Admission(config.frontends, self._ctx)
        self._wakeup_r, self._wakeup_w = os.pipe()
        self._engine: BaseProcess | None = None
        self._engine_conn: Connection | None = None
        self._frontends: dict[int, _Frontend] = {}
        self._port = 0
        #: --grpc-local-socket: bound here, shared by every frontend (each accepts on it).
        self._local: socket.socket | None = None
        self.stopping = False

    # --- processes -----------------------------------------------------------------------

    def _spawn(self, name: str, target: Any, *args: Any) -> tuple[BaseProcess, Connection]:
        ours, theirs = self._ctx.Pipe()
        process = self._ctx.Process(target=target, args=(*args, theirs), name=name, daemon=False)
        process.start()
        theirs.close()
        return process, ours

    def _start_frontend(self, index: int) -> None:
        process, conn = self._spawn(
            f"frontend-{index}",
            run_frontend,
            self._config,
            index,
            self._address,
            self._port,
            self._local,
            self._admission,
        )
        self._frontends[index] = _Frontend(index, process, conn)
        log.info("frontend %d started (pid %s)", index, process.pid)

    def _on_signal(self, signum: int, frame: Any) -> None:
        """The first signal refuses new requests at once where it may (the main loop,
        woken through the wakeup fd, then starts the stop); later ones change nothing,
        as in Triton."""
        if not self._signals:
            self._admission.signalled(lame_duck=self._config.lame_duck_s > 0)
        self._signals.append(signum)

    def _wait(self, timeout: float | None = None) -> list[Any]:
        objects: list[Any] = [self._wakeup_r]
        if self._engine is not None:
            objects += [self._engine.sentinel, self._engine_conn]
        for slot in self._frontends.values():
            objects.append(slot.process.sentinel)
            if not slot.serving:
                objects.append(slot.conn)
        ready = wait(objects, timeout)
        if self._wakeup_r in ready:
            os.read(self._wakeup_r, 512)
        return ready

    # --- the whole life ------------------------------------------------------------------

    def run(self) -> int:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_signal)
        os.set_blocking(self._wakeup_w, False)
        signal.set_wakeup_fd(self._wakeup_w)
        config = self._config
        try:
            self._port, holder = reserve_port(config.grpc_address, config.grpc_port)
            if config.grpc_local_socket:
                self._local = bind_local_socket(config.grpc_local_socket)
        except OSError as exc:
            log.error("%s", exc)
            return 1
        try:
            with holder:
                code = self._start()
                if code is None:
                    code = self._serve()
        finally:
            self._close_local()
        return code

    def _close_local(self) -> None:
        """New local connections are refused from now on (each frontend closes its copy
        of the listening socket when the stop reaches it)."""
        if self._local is not None:
            self._local.close()
            self._local = None
            unlink_quietly(self._config.grpc_local_socket)

    def _start(self) -> int | None:
        """Engine, then frontends; None once all serve, else the exit code."""
        self._engine, self._engine_conn = self._spawn(
            "engine", run_engine, self._config, self._address, self._admission
        )
        log.info("engine started (pid %s)", self._engine.pid)
        metrics_port = 0
        while True:
            ready = self._wait()
            if self._signals:
                return self._stop()
            if self._engine_conn in ready:
                kind, metrics_port = _report(self._engine_conn)
                if kind != "ready":
                    return self._abort()
                break
            if self._engine.sentinel in ready:
                return self._abort()
        for index in range(1, self._config.frontends + 1):
            self._start_frontend(index)
        while not all(slot.serving for slot in self._frontends.values()):
            ready = self._wait()
            if self._signals:
                return self._stop()
            if self._engine.sentinel in ready:
                return self._engine_died()
            for slot in self._frontends.values():
                if slot.conn in ready:
                    if _report(slot.conn)[0] != "serving":
                        return self._abort()
                    slot.serving = True
                elif slot.process.sentinel in ready:
                    return self._abort()
        config = self._config
        log.info("Started GRPCInferenceService at %s:%d", config.grpc_address, self._port)
        if config.metrics.enabled:
            log.info("Started Metrics Service at %s:%d", config.metrics.address, metrics_port)
        return None

    def _serve(self) -> int:
        assert self._engine is not None
        while True:
            ready = self._wait()
            if self._signals:
                return self._stop()
            if self._engine.sentinel in ready:
                return self._engine_died()
            for slot in list(self._frontends.values()):
                if slot.process.sentinel in ready:
                    self._replace(slot)
                elif slot.conn in ready:
                    if _report(slot.conn)[0] == _FAILED:
                        continue  # its sentinel follows
                    slot.serving = True
                    log.info("frontend %d (pid %s) serving", slot.index, slot.process.pid)

    def _replace(self, slot: _Frontend) -> None:
        slot.process.join()
        log.warning(
            "frontend %d (pid %s) exited with %s: starting a new one",
            slot.index,
            slot.process.pid,
            _describe(slot.process.exitcode),
        )
        slot.conn.close()
        # Its followers' calls ended with it: they follow another frontend from now on.
        self._admission.set_busy(slot.index - 1, 0)
        if not slot.serving and time.monotonic() - slot.started < _RESTART_PAUSE:
            time.sleep(_RESTART_PAUSE)  # it failed at once: do not spin
        self._start_frontend(slot.index)

    def _engine_died(self) -> int:
        assert self._engine is not None
        self._engine.join()
        log.error(
            "the engine process (pid %s) exited unexpectedly with %s: stopping the server",
            self._engine.pid,
            _describe(self._engine.exitcode),
        )
        self._end_frontends(5.0)
        return 1

    def _abort(self) -> int:
        """Start-up failed (the failing process logged why): stop everything, exit 1."""
        if self._engine is not None and self._engine.is_alive():
            os.kill(self._engine.pid or 0, signal.SIGTERM)
            self._engine.join(self._config.exit_timeout_secs + _STOP_MARGIN)
            if self._engine.is_alive():
                self._engine.kill()
        self._end_frontends(5.0)
        return 1

    def _end_frontends(self, seconds: float) -> None:
        """They exit by themselves once the engine has drained or is gone; past
        ``seconds`` they are killed (they ignore SIGTERM: the engine leads a stop)."""
        deadline = time.monotonic() + seconds
        for slot in self._frontends.values():
            slot.process.join(max(0.0, deadline - time.monotonic()))
            if slot.process.is_alive():
                slot.process.kill()
                slot.process.join()

    def _await_core_stop(self, deadline: float) -> None:
        """Until the engine's core stop begins (it reports ``stopping`` once the gateways'
        HTTP connections are gone: their calls may still need new local connections
        until then), it exits, or ``deadline``."""
        assert self._engine is not None and self._engine_conn is not None
        while True:
            ready = wait(
                [self._engine_conn, self._engine.sentinel], max(0.0, deadline - time.monotonic())
            )
            if self._engine_conn not in ready:
                return  # it exited, or the deadline passed
            kind, _ = _report(self._engine_conn)
            if kind in ("stopping", _FAILED):
                return

    def _stop(self) -> int:
        """The engine leads the graceful stop; frontends exit once it has drained."""
        assert self._engine is not None
        self.stopping = True
        config = self._config
        log.info(
            "shutting down: waiting up to %.0fs for in-flight requests", config.exit_timeout_secs
        )
        if self._engine.is_alive():
            os.kill(self._engine.pid or 0, signal.SIGTERM)
        deadline = time.monotonic() + config.exit_timeout_secs + _STOP_MARGIN
        self._await_core_stop(deadline)
        self._close_local()
        self._engine.join(max(0.0, deadline - time.monotonic()))
        if self._engine.is_alive():
            log.error("the engine did not stop in time: killing it")
            self._engine.kill()
            self._engine.join()
        self._end_frontends(max(1.0, deadline - time.monotonic()))
        code = self._engine.exitcode
        frontend_codes = [slot.process.exitcode for slot in self._frontends.values()]
        if code == 1 or 1 in frontend_codes:
            return 1  # it logged why (Triton's exit-timeout line)
        if code != 0:
            log.error("the engine exited with %s", _describe(code))
            return 1
        log.info("server stopped")
        return 0


def supervise(config: ServerConfig) -> int:
    huge_pages_for_children()  # the engine, the frontends and the model workers
    return Supervisor(config).run()
