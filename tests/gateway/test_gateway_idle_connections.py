"""Idle and slow-header connections cannot lock clients out of the gateway (issue 26).

A connection waiting for its next request, or for the rest of a header, is parked without
a thread (gateway/parking.py): with ten thousand of them open a new client's health check
and inference are answered, and the gateway's threads stay bounded. Past the descriptor
budget the connections that have waited longest are shed to make room for new ones.
Figures: docs/decisions/031-gateway-idle-connections.md.
"""

from __future__ import annotations

import contextlib
import resource
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import running_gateway
from gateway_process import GatewayProcess, http_request
from server_process import ServerProcess

IDLE = 10_000
ADD_SUB = {
    "inputs": [
        {"name": name, "datatype": "FP32", "shape": [1, 16], "data": [float(i) for i in range(16)]}
        for name in ("INPUT0", "INPUT1")
    ]
}


def _status(pid: int) -> tuple[int, float]:
    """(threads, resident MB) of a process."""
    fields = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
    )
    return int(fields["Threads"]), int(fields["VmRSS"].split()[0]) / 1024


def _open(port: int, count: int, partial: bool = False) -> list[socket.socket]:
    """``count`` connections that send nothing, or (``partial``) half a request header."""
    sockets = []
    for _ in range(count):
        sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        if partial:
            sock.sendall(b"GET /v2/health/ready HTTP/1.1\r\nHost: h\r\n")  # never finished
        sockets.append(sock)
    return sockets


def _is_open(sock: socket.socket) -> bool:
    sock.setblocking(False)
    try:
        return sock.recv(1) != b""
    except BlockingIOError:
        return True
    except OSError:
        return False


def _answers(url: str) -> None:
    """A new client's health check and inference are answered, and right."""
    assert http_request(url, "GET", "/v2/health/ready", timeout=5).status == 200
    reply = http_request(url, "POST", "/v2/models/add_sub/infer", ADD_SUB, timeout=5)
    assert reply.status == 200, reply
    outputs = {o["name"]: o["data"] for o in reply.json()["outputs"]}
    assert outputs["OUTPUT0"] == [2.0 * i for i in range(16)]


@contextlib.contextmanager
def _descriptors(needed: int) -> Iterator[None]:
    """This process's soft descriptor limit raised for ``needed`` client sockets."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < needed:
        pytest.skip(f"the descriptor limit ({hard}) is below the {needed} this test opens")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, needed), hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_ten_thousand_idle_connections_lock_no_client_out(default_server: ServerProcess) -> None:
    with _descriptors(IDLE + 1024), running_gateway(default_server.url) as gateway:
        port = int(gateway.url.rsplit(":", 1)[1])
        _answers(gateway.url)
        threads, rss = _status(gateway.pid)
        held = _open(port, IDLE // 10, partial=True) + _open(port, IDLE - IDLE // 10)
        try:
            _answers(gateway.url)
            _answers(gateway.url)
            now_threads, now_rss = _status(gateway.pid)
            # Not a thread per connection: bounded by the pool, far below the connections.
            assert now_threads <= threads + 200, (threads, now_threads)
            assert now_rss <= rss + 150, (rss, now_rss)
            assert all(_is_open(sock) for sock in held[-100:])  # nothing had to be shed
        finally:
            for sock in held:
                sock.close()
        _answers(gateway.url)


class _LimitedGateway(GatewayProcess):
    """The gateway with 1,024 descriptors (a budget of 768 connections)."""

    def __init__(self, grpc_target: str) -> None:
        super().__init__(grpc_target)
        self.args = ["prlimit", "--nofile=1024:1024", "--", *self.args]


def test_past_the_budget_the_longest_waiting_are_shed_first(
    default_server: ServerProcess,
) -> None:
    with _descriptors(2048):
        gateway = _LimitedGateway(default_server.url).start()
        try:
            port = int(gateway.url.rsplit(":", 1)[1])
            oldest = _open(port, 400)  # idle since they connected
            slow = _open(port, 200, partial=True)  # a header arriving since just after
            time.sleep(0.2)
            newest = _open(port, 600)  # 1,200 in all: 432 must go
            _answers(gateway.url)
            deadline = time.monotonic() + 10
            while any(_is_open(s) for s in oldest) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert not any(_is_open(s) for s in oldest)
            assert sum(_is_open(s) for s in slow) >= 150  # shed after the oldest idle ones
            assert all(_is_open(s) for s in newest)
            for sock in (*oldest, *slow, *newest):
                sock.close()
            _answers(gateway.url)
        finally:
            assert gateway.stop() == 0, gateway.log
