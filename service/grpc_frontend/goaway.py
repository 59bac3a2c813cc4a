"""GOAWAY at the end of a graceful stop, where it cancels nothing.

Triton's gRPC endpoint stops with grpc's shutdown after its core has stopped: each
connection gets GOAWAY (the real Triton 2.51 here: GOAWAY with the last stream id
2^31-1, a PING, the final GOAWAY, then FIN), so its clients see a clean end. grpc has no
call that sends GOAWAY alone: its shutdown also cancels the calls that have arrived but
not been handed to a servicer yet, a bare CANCELLED (exiting.py; 6 per stop with 8 busy
clients, measured). So the process sends it only once its connections are quiet: every
answer owed is out (``finish``), and no byte has arrived on any of this process's gRPC
connections for ``QUIET_S`` (TCP_INFO's ``tcpi_last_data_recv``) with nothing unread.
A connection with a call arriving then has it answered (the server is idle) before the
quiet span ends; clients that keep sending never let it come, and the process ends as
before, its connections closed with it (UNAVAILABLE, never CANCELLED). Decision 056.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import socket
import struct
import termios

from .own_sockets import own_sockets

__all__ = ["QUIET_S", "connections_quiet", "wait_quiet"]

#: How long no byte may have arrived on any connection before GOAWAY goes out.
QUIET_S = 0.1
_POLL_S = 0.02
_ESTABLISHED = 1  # tcp_info.tcpi_state
_LAST_DATA_RECV = 52  # tcp_info.tcpi_last_data_recv: ms since data last arrived


def _quiet(sock: socket.socket, port: int, quiet_ms: int) -> bool:
    """True unless ``sock`` is an established TCP connection on local ``port`` with
    data arrived in the last ``quiet_ms`` or still unread."""
    if sock.family not in (socket.AF_INET, socket.AF_INET6) or sock.type != socket.SOCK_STREAM:
        return True
    if sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN):
        return True  # a listener
    if int(sock.getsockname()[1]) != port:
        return True
    info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 104)
    if info[0] != _ESTABLISHED:
        return True
    if struct.unpack_from("I", info, _LAST_DATA_RECV)[0] < quiet_ms:
        return False
    unread = fcntl.ioctl(sock.fileno(), termios.FIONREAD, b"\0\0\0\0")
    return int(struct.unpack("i", unread)[0]) == 0


def connections_quiet(port: int, quiet_s: float = QUIET_S) -> bool:
    """Whether every established TCP connection of this process on local ``port`` has
    been quiet for ``quiet_s`` (False where ``/proc/self/fd`` cannot be read: not
    Linux, where no GOAWAY is sent)."""
    try:
        sockets = own_sockets()
    except OSError:
        return False
    quiet_ms = int(quiet_s * 1000)
    with contextlib.closing(sockets):
        for _fd, probe in sockets:
            try:
                if not _quiet(probe, port, quiet_ms):
                    return False
            except (OSError, struct.error):
                continue  # closed meanwhile
    return True


async def wait_quiet(port: int, seconds: float, quiet_s: float = QUIET_S) -> bool:
    """Until this process's connections on ``port`` are quiet (True), at most
    ``seconds`` (False: clients kept sending)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while True:
        if connections_quiet(port, quiet_s):
            return True
        if loop.time() >= deadline:
            return False
        await asyncio.sleep(min(_POLL_S, max(0.0, deadline - loop.time())))
