"""Binding the HTTP port, shared by a single gateway and the workers' supervisor (which
must not import grpc before it starts the workers)."""

from __future__ import annotations

import errno
import socket

__all__ = ["StartError", "bind"]


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
