"""``python -m gateway --workers N``: N gateway processes serving one port.

The supervisor (this module, no grpc imported) first binds the port alone, as a single
gateway would, so a busy port is the same one-line error; then it starts N workers
(``python -m gateway`` again, same flags), each binding that port with SO_REUSEPORT (the
kernel spreads connections over them) and opening its own channel to the service. It
logs ``Started HTTPService at HOST:PORT`` once every worker listens.

SIGTERM/SIGINT to the supervisor goes to every worker, which drains as a single gateway
does; the supervisor exits 0 once all have exited 0. A worker that dies stops the others
and the supervisor exits 1. Workers run in their own session (a terminal's Ctrl-C reaches
only the supervisor) and hold a "lifeline" pipe from it: if the supervisor is killed, the
pipe closes and they drain and exit by themselves.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from wire.heap import huge_pages_for_children

from .config import GatewayConfig
from .sockets import StartError, bind

__all__ = ["WORKER_ENV", "WorkerLink", "supervise"]

log = logging.getLogger("gateway")

#: Set by the supervisor in each worker's environment: "index,count,ready_fd,lifeline_fd".
WORKER_ENV = "TRITON_GATEWAY_WORKER"
_START_TIMEOUT = 60.0
_KILL_GRACE = 15.0  # after the exit timeout, before a worker that hangs is killed


@dataclass(frozen=True, slots=True)
class WorkerLink:
    """A worker's end of the supervisor's pipes."""

    index: int
    count: int
    ready_fd: int
    lifeline_fd: int

    @classmethod
    def from_env(cls) -> WorkerLink | None:
        spec = os.environ.pop(WORKER_ENV, None)
        if spec is None:
            return None
        index, count, ready_fd, lifeline_fd = (int(part) for part in spec.split(","))
        return cls(index, count, ready_fd, lifeline_fd)

    def serving(self, on_parent_gone: Callable[[], None]) -> None:
        """Tell the supervisor this worker listens; stop when the supervisor is gone."""
        os.write(self.ready_fd, b"1")
        os.close(self.ready_fd)

        def lifeline() -> None:
            while os.read(self.lifeline_fd, 1):  # only EOF comes: the supervisor exited
                pass
            on_parent_gone()

        threading.Thread(target=lifeline, name="lifeline", daemon=True).start()


def supervise(config: GatewayConfig, argv: Sequence[str]) -> int:
    """Run ``config.workers`` worker processes until they stop; the exit code."""
    try:
        probe = bind(config.http_address, config.http_port)  # alone: busy means busy
    except StartError as exc:
        log.error("failed to start HTTP service: %s", exc)
        return 1
    host, port = probe.getsockname()[:2]
    probe.close()
    ready_r, ready_w = os.pipe()
    life_r, life_w = os.pipe()
    args = [sys.executable, "-m", "gateway", *argv, "--http-port", str(port)]
    huge_pages_for_children()  # large bodies are copied in the workers
    workers: list[subprocess.Popen[bytes]] = []
    for index in range(config.workers):
        env = {**os.environ, WORKER_ENV: f"{index},{config.workers},{ready_w},{life_r}"}
        workers.append(
            subprocess.Popen(args, env=env, pass_fds=(ready_w, life_r), start_new_session=True)
        )
    os.close(ready_w)
    os.close(life_r)
    supervisor = _Supervisor(workers, config.exit_timeout_secs)
    try:
        if not supervisor.wait_ready(ready_r):
            return supervisor.stop(code=1)
        log.info("REST gateway in front of %s", config.upstream)
        log.info("HTTP served by %d worker processes", config.workers)
        log.info("Started HTTPService at %s:%d", host, port)
        return supervisor.run()
    finally:
        os.close(ready_r)
        os.close(life_w)  # any worker still alive sees its lifeline end


class _Supervisor:
    def __init__(self, workers: list[subprocess.Popen[bytes]], exit_timeout: float) -> None:
        self._workers = workers
        self._exit_timeout = exit_timeout
        self._stop_requested = 0
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, self._on_signal)

    def _on_signal(self, signum: int, frame: object) -> None:
        self._stop_requested += 1
        self._forward(signal.SIGTERM)  # the second one makes the workers stop at once

    def _forward(self, sig: int) -> None:
        for worker in self._workers:
            if worker.poll() is None:
                worker.send_signal(sig)

    def wait_ready(self, ready_r: int) -> bool:
        """Until every worker listens; False if one exits first or the start takes too
        long (the worker logged why)."""
        os.set_blocking(ready_r, False)
        ready = 0
        deadline = time.monotonic() + _START_TIMEOUT
        while ready < len(self._workers):
            if self._stop_requested or time.monotonic() > deadline:
                return False
            with contextlib.suppress(BlockingIOError):
                ready += len(os.read(ready_r, 64))
            if any(worker.poll() is not None for worker in self._workers):
                return False
            time.sleep(0.02)
        return True

    def run(self) -> int:
        """Until all workers have exited; 1 if one exited without being asked to."""
        code = 0
        kill_at: float | None = None
        while any(worker.poll() is None for worker in self._workers):
            if not self._stop_requested and any(w.poll() is not None for w in self._workers):
                died = next(w for w in self._workers if w.poll() is not None)
                log.error("HTTP worker (pid %d) exited with %s", died.pid, died.returncode)
                code = 1
                self._stop_requested = 1
                self._forward(signal.SIGTERM)
            if self._stop_requested and kill_at is None:
                kill_at = time.monotonic() + self._exit_timeout + _KILL_GRACE
            if kill_at is not None and time.monotonic() > kill_at:
                self._forward(signal.SIGKILL)
            time.sleep(0.05)
        codes = [worker.returncode for worker in self._workers]
        return code or (0 if all(c == 0 for c in codes) else 1)

    def stop(self, code: int) -> int:
        """Stop every worker (killing those that outlive the exit timeout); ``code``."""
        self._forward(signal.SIGTERM)
        deadline = time.monotonic() + self._exit_timeout + _KILL_GRACE
        for worker in self._workers:
            try:
                worker.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait()
        return code
