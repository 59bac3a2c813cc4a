"""``--workers N``: N gateway processes serve one port and stop together; a busy port is
one clear line and exit code 1, for one process or several."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from gateway_process import GatewayProcess, http_request
from server_process import REPO_ROOT, SERVICE_PYTHON, ServerProcess


def _children(pid: int) -> set[int]:
    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        text = (task / "children").read_text().split()
        found.update(int(child) for child in text)
    return found


def _listening_inodes(port: int) -> set[str]:
    """Inodes of the LISTEN sockets on ``port`` (IPv4)."""
    inodes = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, state, inode = fields[1], fields[3], fields[9]
        if state == "0A" and int(local.split(":")[1], 16) == port:
            inodes.add(inode)
    return inodes


def _socket_inodes(pid: int) -> set[str]:
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    return inodes


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture(scope="module")
def service() -> Iterator[ServerProcess]:
    with ServerProcess() as server:
        yield server


def test_two_workers_serve_one_port_and_stop_together(service: ServerProcess) -> None:
    gw = GatewayProcess(service.url, ["--workers", "2"]).start()
    try:
        workers = _children(gw.pid)
        assert len(workers) == 2, gw.log
        listening = _listening_inodes(gw.port)
        assert len(listening) == 2  # one SO_REUSEPORT socket per worker
        for worker in workers:
            assert _socket_inodes(worker) & listening, f"worker {worker} does not listen"
        for _ in range(20):  # fresh connections, spread over the workers by the kernel
            assert http_request(gw.url, "GET", "/v2/health/ready").status == 200
        reply = http_request(gw.url, "POST", "/v2/models/text_upper/generate", {"TEXT": ["abc"]})
        assert reply.status == 200 and reply.json()["UPPER"] == "ABC", reply
        assert gw.log.count("HTTP worker ") == 2
        assert gw.log.count("Started HTTPService at") == 1
        gw.send_signal(signal.SIGTERM)
        assert gw.wait(30) == 0, gw.log
        deadline = time.monotonic() + 5
        while any(_alive(w) for w in workers) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(_alive(w) for w in workers)
    finally:
        gw.kill()


def test_a_worker_that_dies_stops_the_gateway(service: ServerProcess) -> None:
    gw = GatewayProcess(service.url, ["--workers", "2"]).start()
    try:
        first, second = sorted(_children(gw.pid))
        os.kill(first, signal.SIGKILL)
        assert gw.wait(30) == 1
        assert "exited with -9" in gw.log
        assert not _alive(second)
    finally:
        gw.kill()


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_busy_port_is_one_line_and_exit_1(workers: str) -> None:
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen(1)
    port = holder.getsockname()[1]
    try:
        done = subprocess.run(
            [
                *(SERVICE_PYTHON, "-m", "gateway", "--grpc-target", "127.0.0.1:1"),
                *("--http-address", "127.0.0.1", "--http-port", str(port), "--workers", workers),
            ],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        holder.close()
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("E")]
    assert len(errors) == 1, done.stderr
    assert errors[0].endswith(
        f"failed to start HTTP service: Socket '127.0.0.1:{port}' already in use"
    )
