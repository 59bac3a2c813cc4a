"""Closing the gRPC listener while the server goes on serving its open connections.

grpc has no call for that: its stop closes the listener, sends GOAWAY and cancels every
call that arrives afterwards, all at once. Behind a balancer that opens a connection per
request (deploy/nginx/), a call whose connection was accepted a moment before the stop
then fails (CANCELLED, or a reset nginx answers with 502). So a draining server first
closes only its listening sockets, serves what still arrives on open connections for a
moment, and only then runs grpc's stop (docs/architecture.md, "Start-up and shutdown").
"""

from __future__ import annotations

import logging
import os
import socket
import struct
import time

from .own_sockets import own_sockets

__all__ = ["close_listeners"]

log = logging.getLogger(__name__)


def close_listeners(port: int, *, wait_s: float = 0.05) -> int:
    """Close every listening TCP socket of this process bound to ``port``; returns how
    many (0 where ``/proc/self/fd`` does not exist: not Linux).

    Each one is swapped for an unbound stand-in socket with ``dup2``, so the kernel
    closes the listener (new connections are refused) and grpc's poller never hears of
    it; grpc's own stop later closes the stand-in. A connection still waiting in the
    accept queue would be reset, so a listener is swapped once its queue is empty (grpc
    accepts within microseconds) or after ``wait_s``.
    """
    try:
        sockets = own_sockets()
    except OSError:
        return 0
    closed = 0
    for fd, probe in sockets:
        if not _is_listener_on(probe, port):
            continue
        _wait_accept_queue_empty(probe, wait_s)
        with socket.socket(probe.family, socket.SOCK_STREAM) as standin:
            os.dup2(standin.fileno(), fd, inheritable=False)
        closed += 1
        # Moving on closes the probe: the last reference to the listening socket.
    log.debug("closed %d listening socket(s) on port %d", closed, port)
    return closed


def _is_listener_on(sock: socket.socket, port: int) -> bool:
    try:
        if sock.family not in (socket.AF_INET, socket.AF_INET6):
            return False
        if sock.type != socket.SOCK_STREAM:
            return False
        if not sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN):
            return False
        return int(sock.getsockname()[1]) == port
    except OSError:
        return False


def _accept_queue(sock: socket.socket) -> int:
    """Connections waiting to be accepted (TCP_INFO's tcpi_unacked on a listener)."""
    info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 104)
    return int(struct.unpack_from("I", info, 24)[0])


def _wait_accept_queue_empty(sock: socket.socket, wait_s: float) -> None:
    deadline = time.monotonic() + wait_s
    try:
        while _accept_queue(sock) and time.monotonic() < deadline:
            time.sleep(0.0005)
    except (OSError, struct.error):
        return
