"""Start the REST gateway (``python -m gateway``) as a subprocess on a free loopback port.

Standard library only, like tests/server_process.py: client-environment tests must not
import ``gateway`` (it needs the server's protobuf). The gateway binds port 0 and logs
``Started HTTPService at HOST:PORT``; the port is read from that line.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
SERVICE_PYTHON = os.environ.get("SERVICE_PYTHON", str(REPO_ROOT / ".venv" / "bin" / "python"))

_STARTED = re.compile(r"Started HTTPService at [^\s:]+:(\d+)")


class GatewayProcess:
    """``python -m gateway --grpc-target TARGET`` with its stderr collected."""

    def __init__(self, grpc_target: str, extra_args: Sequence[str] = ()) -> None:
        self.args = [
            SERVICE_PYTHON,
            "-m",
            "gateway",
            "--grpc-target",
            grpc_target,
            "--http-address",
            "127.0.0.1",
            "--http-port",
            "0",
            *extra_args,
        ]
        self.port = 0
        self.lines: list[str] = []
        self._proc: subprocess.Popen[str] | None = None
        self._reader: threading.Thread | None = None
        self._ready = threading.Event()

    @property
    def url(self) -> str:
        """host:port, as tritonclient.http takes it."""
        return f"127.0.0.1:{self.port}"

    @property
    def log(self) -> str:
        return "".join(self.lines)

    def start(self, timeout: float = 30.0) -> GatewayProcess:
        self._proc = subprocess.Popen(
            self.args,
            cwd=REPO_ROOT,
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
                raise RuntimeError(f"gateway exited with {self._proc.returncode}:\n{self.log}")
            if time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"gateway did not start in {timeout}s:\n{self.log}")
        return self

    def _read(self) -> None:
        assert self._proc is not None and self._proc.stderr is not None
        for line in self._proc.stderr:
            self.lines.append(line)
            match = _STARTED.search(line)
            if match and not self._ready.is_set():
                self.port = int(match.group(1))
                self._ready.set()

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
        if self._reader is not None:
            self._reader.join(timeout=5)
        if self._proc is not None and self._proc.stderr is not None:
            self._proc.stderr.close()

    def __enter__(self) -> GatewayProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class Reply:
    """A raw HTTP answer: status, headers (lower-case names) and body."""

    def __init__(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.status = status
        self.headers = headers
        self.body = body

    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def error(self) -> str:
        doc = self.json()
        assert set(doc) == {"error"}, doc
        return str(doc["error"])

    def __repr__(self) -> str:
        return f"Reply({self.status}, {self.body[:300]!r})"


def http_request(
    url: str,
    method: str,
    path: str,
    body: bytes | str | Any = None,
    headers: Mapping[str, str] | None = None,
    timeout: float = 30.0,
) -> Reply:
    """One request on a fresh connection; a dict or list body is sent as JSON."""
    if body is not None and not isinstance(body, bytes | str):
        body = json.dumps(body)
    host, port = url.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=timeout)
    try:
        conn.request(method, path, body=body, headers=dict(headers or {}))
        response = conn.getresponse()
        data = response.read()
        return Reply(response.status, {k.lower(): v for k, v in response.getheaders()}, data)
    finally:
        conn.close()
