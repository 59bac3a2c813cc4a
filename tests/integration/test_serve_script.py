"""scripts/serve.sh as a user runs it: a busy port ends the start with exit code 1.

serve.sh needs a fixed gRPC port (the gateway is told it), so these tests pick free ones.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from server_process import REPO_ROOT

SERVE = ["bash", str(REPO_ROOT / "scripts" / "serve.sh")]
#: Light and quick: one frontend (a supervisor, an engine and a frontend: the default layout).
SERVICE_ARGS = ["--grpc-address", "127.0.0.1", "--metrics-address", "127.0.0.1"]
SERVICE_ARGS += ["--metrics-port", "0", "--frontends", "1"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def runtime_dir() -> Iterator[Path]:
    """A stand-in $XDG_RUNTIME_DIR; short, as a socket path has at most 107 bytes."""
    path = Path(tempfile.mkdtemp(prefix="xdg-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.parametrize("busy", ["http", "grpc"])
def test_a_busy_port_ends_serve_sh_with_exit_code_1(runtime_dir: Path, busy: str) -> None:
    """Either process failing to bind stops the other, and serve.sh exits with the
    failing one's 1 (not 143 from the other's stop); its one line comes first. (A service
    stopped just after it spawned its engine adds a line of its own: not asserted.)"""
    with socket.socket() as taken:
        address = "0.0.0.0" if busy == "http" else "127.0.0.1"  # the processes' binds
        taken.bind((address, 0))
        taken.listen()
        port = taken.getsockname()[1]
        grpc_port = port if busy == "grpc" else _free_port()
        http_port = port if busy == "http" else _free_port()
        env = {
            **os.environ,
            "XDG_RUNTIME_DIR": str(runtime_dir),
            "GATEWAY_HTTP_PORT": str(http_port),
        }
        done = subprocess.run(
            [*SERVE, *SERVICE_ARGS, "--grpc-port", str(grpc_port)],
            cwd=REPO_ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=90,
        )
    service = "HTTP" if busy == "http" else "GRPC"
    assert done.returncode == 1, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("E")]
    assert errors, done.stderr
    assert errors[0].endswith(
        f"failed to start {service} service: Socket '{address}:{port}' already in use"
    )
    assert "Traceback" not in done.stderr
