"""Binding the HTTP port, shared by a single gateway and the workers' supervisor (which
must not import grpc before it starts the workers)."""

from __future__ import annotations

import errno
import socket
import ssl
from collections.abc import Sequence
from typing import Any

__all__ = ["StartError", "bind", "send_parts"]


class StartError(Exception):
    """The HTTP service cannot start (port, address or certificate); one line says why."""


def bind(address: str, port: int, *, reuse_port: bool = False) -> socket.socket:
    """A bound TCP socket (not yet listening); StartError names the address at fault.

    ``reuse_port``: only for the worker processes of one gateway, whose supervisor has
    made sure that nothing else holds the port.
    """
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        # Inherited by accepted connections: no Nagle delay behind a small answer.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind((address, port))
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise StartError(f"Socket '{address}:{port}' already in use") from None
        raise StartError(f"cannot bind '{address}:{port}': {exc.strerror or exc}") from None
    return sock


def send_parts(sock: socket.socket, parts: Sequence[Any], total: int = -1) -> None:
    """Send bytes-like ``parts`` in order, each from where it is (no joined copy): one
    ``sendmsg`` when the socket takes everything at once, the rest resumed where it
    stopped (a full socket buffer, a signal). A TLS socket has no ``sendmsg``: each part
    goes in turn (TCP_NODELAY is set, so the second write is not held back)."""
    if isinstance(sock, ssl.SSLSocket):
        for part in parts:
            sock.sendall(part)
        return
    if total < 0:
        total = sum(memoryview(p).nbytes for p in parts)
    sent = sock.sendmsg(parts)
    if sent >= total:
        return
    views = [memoryview(p).cast("B") for p in parts]
    remaining = total - sent
    while remaining > 0:
        while views and sent >= views[0].nbytes:  # drop what went out whole
            sent -= views.pop(0).nbytes
        views[0] = views[0][sent:]
        sent = sock.sendmsg(views)
        remaining -= sent
