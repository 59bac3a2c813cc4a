"""Start the real server as a subprocess on a free loopback port, and stop it by its PID.

Usable from both test environments: only the standard library. The server binds port 0
and logs the port it got, so tests never race for a "free" port.
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Self

REPO_ROOT = Path(__file__).resolve().parents[1]
SERVICE_PYTHON = os.environ.get("SERVICE_PYTHON", str(REPO_ROOT / ".venv" / "bin" / "python"))
DEFAULT_REPOSITORY = REPO_ROOT / "service" / "default_repository"
#: Process layout of test servers: ``--frontends`` (0: one process). scripts/test.sh runs
#: a part of the suite again with SERVICE_FRONTENDS=2 (the engine / frontends split).
FRONTENDS = os.environ.get("SERVICE_FRONTENDS", "0")
#: Test servers also serve their unary RPCs on a local socket (``--grpc-local-socket``) and
#: gateways started for them use it, as scripts/serve.sh runs the two; SERVICE_LOCAL_SOCKET=0
#: leaves it out. Server url -> the server, for ``GatewayProcess``: a port is reused once
#: its server is gone, so the entry counts only while that server runs.
LOCAL_SOCKET = os.environ.get("SERVICE_LOCAL_SOCKET", "1") != "0"
LOCAL_SOCKETS: dict[str, ServerProcess] = {}

_STARTED = re.compile(r"Started GRPCInferenceService at [^\s:]+:(\d+)")


def socket_dir() -> str:
    """A private directory for a local socket, removed when the test session ends (not at
    the server's stop: a test may start another server on the same path)."""
    path = tempfile.mkdtemp(prefix="svc-")
    atexit.register(shutil.rmtree, path, True)
    return path


class LoggedProcess:
    """A subprocess whose stderr is collected; ready once a line matches ``started``, from
    which the bound port is read. Shared by the service and gateway helpers."""

    name = "process"
    started: re.Pattern[str] = _STARTED

    def __init__(
        self, args: Sequence[str], env: dict[str, str] | None = None, cwd: Path = REPO_ROOT
    ) -> None:
        self.args = list(args)
        self.env = {**os.environ, **(env or {})}
        self.cwd = cwd  # `python -m service` imports the `service` found here first
        self.port = 0
        self.lines: list[str] = []
        self._proc: subprocess.Popen[str] | None = None
        self._reader: threading.Thread | None = None
        self._ready = threading.Event()

    @property
    def url(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self._proc is not None
        return self._proc.pid

    @property
    def log(self) -> str:
        return "".join(self.lines)

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self, timeout: float = 60.0) -> Self:
        self._proc = subprocess.Popen(
            self.args,
            cwd=self.cwd,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        deadline = time.monotonic() + timeout
        while not self._ready.wait(0.05):
            if self._proc.poll() is not None:
                self._close_pipe()
                raise RuntimeError(f"{self.name} exited with {self._proc.returncode}:\n{self.log}")
            if time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"{self.name} did not start in {timeout}s:\n{self.log}")
        return self

    def _read(self) -> None:
        assert self._proc is not None and self._proc.stderr is not None
        for line in self._proc.stderr:
            self.lines.append(line)
            match = self.started.search(line)
            if match and not self._ready.is_set():
                self.port = int(match.group(1))
                self._ready.set()

    def wait_for_log(self, fragment: str, timeout: float = 10.0) -> None:
        """Until a line holding ``fragment`` has been logged."""
        deadline = time.monotonic() + timeout
        while fragment not in self.log:
            if time.monotonic() > deadline:
                raise AssertionError(f"{fragment!r} not logged in {timeout}s:\n{self.log}")
            time.sleep(0.005)

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM, then wait; returns the exit code."""
        if self._proc is None:
            return 0
        if self._proc.poll() is None:
            self._proc.send_signal(signal.SIGTERM)
        try:
            code = self._proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise
        self._close_pipe()
        return code

    def send_signal(self, sig: int) -> None:
        assert self._proc is not None
        self._proc.send_signal(sig)

    def wait(self, timeout: float) -> int:
        """Wait for the process to exit by itself; returns the exit code."""
        assert self._proc is not None
        code = self._proc.wait(timeout)
        self._close_pipe()
        return code

    def kill(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()
        self._close_pipe()

    def _close_pipe(self) -> None:
        """Read the log to its end, then close the pipe (no ResourceWarning at exit)."""
        if self._reader is not None:
            self._reader.join(timeout=5)
        if self._proc is not None and self._proc.stderr is not None:
            self._proc.stderr.close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class ServerProcess(LoggedProcess):
    """``python -m service`` on the given repositories; ``url`` is ``127.0.0.1:<port>``."""

    name = "server"

    def __init__(
        self,
        repositories: Sequence[Path] = (DEFAULT_REPOSITORY,),
        extra_args: Sequence[str] = (),
        env: dict[str, str] | None = None,
    ) -> None:
        # Port 0 for metrics too, so test servers never race for Triton's default 8002.
        args = [SERVICE_PYTHON, "-m", "service", "--grpc-address", "127.0.0.1", "--grpc-port", "0"]
        args += ["--metrics-address", "127.0.0.1", "--metrics-port", "0"]
        if not any(a == "--frontends" or a.startswith("--frontends=") for a in extra_args):
            args += ["--frontends", FRONTENDS]
        for repo in repositories:
            args += ["--model-repository", str(repo)]
        self.local_socket = ""
        if LOCAL_SOCKET and not any(a.startswith("--grpc-local-socket") for a in extra_args):
            self.local_socket = os.path.join(socket_dir(), "rpc.sock")
            args += ["--grpc-local-socket", self.local_socket]
        super().__init__([*args, *extra_args], env)

    def start(self, timeout: float = 60.0) -> Self:
        super().start(timeout)
        if self.local_socket:
            LOCAL_SOCKETS[self.url] = self
        return self
