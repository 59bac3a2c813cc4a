"""The sockets this process holds, found by their descriptors in ``/proc/self/fd``.

grpc keeps its listeners and connections to itself; the drain (``drain_listener.py``)
and the stop's GOAWAY (``goaway.py``) look at them from outside, through a duplicate of
each descriptor, without grpc knowing.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Generator

__all__ = ["own_sockets"]

_FD_DIR = "/proc/self/fd"


def own_sockets() -> Generator[tuple[int, socket.socket], None, None]:
    """Each socket descriptor of this process with a duplicate to probe, closed when the
    iteration moves on. Raises OSError at once where ``/proc/self/fd`` cannot be read
    (not Linux); a descriptor closed meanwhile is skipped."""
    return _probes([int(name) for name in os.listdir(_FD_DIR)])


def _probes(fds: list[int]) -> Generator[tuple[int, socket.socket], None, None]:
    for fd in fds:
        try:
            if not os.readlink(f"{_FD_DIR}/{fd}").startswith("socket:"):
                continue
            probe = socket.socket(fileno=os.dup(fd))
        except OSError:
            continue  # closed meanwhile, or not ours to look at
        with probe:
            yield fd, probe
