"""Connections waiting for their next request hold no thread: one selector thread watches
them and hands the ones that have something to read to the listener's bounded pool.

A thread per open connection let 4,096 idle TCP connections take every slot and lock
every other client out (health checks included) for the idle timeout, with 4,106 threads
and 179 MB (issue 26). Here an idle keep-alive connection, a new one that has sent
nothing yet, and one whose request header is still arriving cost a file descriptor and a
few objects. When the open connections reach the limit, the one parked longest is closed
to make room for a new one: idle and slow-header clients are shed first, a connection
being answered never. docs/decisions/031-gateway-idle-connections.md has the figures.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import logging
import selectors
import socket
import threading
import time
from collections.abc import Callable
from typing import Protocol

__all__ = ["Parkable", "Parker"]

log = logging.getLogger("gateway.http")


class Parkable(Protocol):
    """What the parker needs of a connection."""

    #: Since when it has waited (monotonic): when it became idle, or when the request
    #: whose header is still arriving began. The oldest is shed first and expires first.
    waiting_since: float

    def fileno(self) -> int: ...

    def close(self) -> None: ...


class Parker:
    """The selector thread: parked connections, the limit, the idle timeout."""

    def __init__(
        self,
        dispatch: Callable[[Parkable], None],
        limit: int,
        idle_timeout: float,
    ) -> None:
        self._dispatch = dispatch
        self._limit = limit
        self._idle_timeout = idle_timeout
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._lock = threading.Lock()
        self._arriving: list[tuple[Parkable, bool]] = []  # (connection, new)
        #: Parked connections -> their heap entry's key; the heap orders them by how long
        #: they have waited (entries of connections no longer parked are skipped).
        self._parked: dict[Parkable, tuple[float, int]] = {}
        self._heap: list[tuple[float, int, Parkable]] = []
        self._order = itertools.count()
        self.open = 0  # connections open: parked, being served, or arriving
        self._stopped = False
        threading.Thread(target=self._run, name="http-parker", daemon=True).start()

    @property
    def parked(self) -> int:
        return len(self._parked)

    def add(self, connection: Parkable) -> None:
        """A new connection (from the accept thread): parked until it sends something."""
        self._hand_over(connection, new=True)

    def park(self, connection: Parkable) -> None:
        """A served connection waiting for its next request."""
        self._hand_over(connection, new=False)

    def closed(self) -> None:
        """A connection that was being served has closed."""
        with self._lock:
            self.open -= 1

    def stop(self) -> None:
        self._stopped = True
        self._wake()

    def _hand_over(self, connection: Parkable, new: bool) -> None:
        with self._lock:
            self._arriving.append((connection, new))
            if new:
                self.open += 1
        self._wake()

    def _wake(self) -> None:
        with contextlib.suppress(OSError):  # full: a wake-up is pending anyway
            self._wake_w.send(b"\0")

    def _run(self) -> None:
        next_sweep = time.monotonic() + 1.0
        while not self._stopped:
            for key, _ in self._selector.select(timeout=1.0):
                connection = key.data
                if connection is None:
                    self._take_arrivals()
                    continue
                self._selector.unregister(key.fileobj)
                del self._parked[connection]
                self._dispatch(connection)
            if len(self._heap) > 2 * len(self._parked) + 1024:  # drop the skipped entries
                self._heap = [(*k, c) for c, k in self._parked.items()]
                heapq.heapify(self._heap)
            now = time.monotonic()
            if now >= next_sweep:
                next_sweep = now + 1.0
                self._expire(now)
        for connection in list(self._parked):
            self._drop(connection)
        self._selector.close()
        self._wake_r.close()
        self._wake_w.close()

    def _take_arrivals(self) -> None:
        with contextlib.suppress(OSError):
            while self._wake_r.recv(4096):
                pass
        with self._lock:
            arriving, self._arriving = self._arriving, []
        for connection, new in arriving:
            if new and self.open > self._limit and not self._shed_oldest():
                self._close(connection)  # every connection is being answered: refuse it
                continue
            try:
                self._selector.register(connection.fileno(), selectors.EVENT_READ, connection)
            except (OSError, ValueError):  # closed meanwhile
                self._close(connection)
                continue
            key = (connection.waiting_since, next(self._order))
            self._parked[connection] = key
            heapq.heappush(self._heap, (*key, connection))

    def _oldest(self) -> Parkable | None:
        heap = self._heap
        while heap:
            since, order, connection = heap[0]
            if self._parked.get(connection) == (since, order):
                return connection
            heapq.heappop(heap)
        return None

    def _shed_oldest(self) -> bool:
        """Close the connection that has waited longest (idle, or a header still arriving)."""
        oldest = self._oldest()
        if oldest is None:
            return False
        self._drop(oldest)
        return True

    def _expire(self, now: float) -> None:
        while (oldest := self._oldest()) is not None:
            if oldest.waiting_since > now - self._idle_timeout:
                return
            self._drop(oldest)

    def _drop(self, connection: Parkable) -> None:
        with contextlib.suppress(KeyError, ValueError, OSError):
            self._selector.unregister(connection.fileno())
        self._parked.pop(connection, None)
        self._close(connection)

    def _close(self, connection: Parkable) -> None:
        with self._lock:
            self.open -= 1
        connection.close()
