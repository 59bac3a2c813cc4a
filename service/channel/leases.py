"""Large outputs read in place from the engine's arena, their blocks freed when unused.

A frontend copied every output out of the engine's slab into ``bytes`` as soon as the
response arrived, so that the block could go back at once; the serializer then copied
those bytes again into the message. For a large output (``LEASE_MIN_BYTES`` and up) the
first copy is skipped: the response carries a view of the block, which stays the
engine's to reuse only once nothing refers to the view any more (the message has been
serialized, the response dropped). The view's exporter is a numpy array over the block;
its finalizer notes the block as free and one FREE message, per loop iteration, takes
what was noted to the engine.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import Callable
from typing import Any, cast

import numpy as np

from .slabs import ArenaMap

__all__ = ["LEASE_MIN_BYTES", "Leases"]

#: Outputs at least this large are leased rather than copied out (the size where a
#: message takes the split wire path too: grpc_frontend/large_messages.py).
LEASE_MIN_BYTES = 256 << 10


class Leases:
    """The leased blocks of one arena map; ``send_free`` takes the offsets to free."""

    def __init__(
        self,
        arena: ArenaMap,
        send_free: Callable[[list[int]], None],
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self._arena = arena
        self._send_free = send_free
        self._loop = loop
        self._thread = threading.get_ident()  # the loop's thread: no wake-up needed there
        self._freed: list[int] = []
        self._flush_scheduled = False
        self.closed = False
        self.outstanding = 0  # leased blocks not yet given back

    def lease(self, offset: int, size: int) -> memoryview:
        """A view of the block; the block is freed once the view and every view made from
        it are gone."""
        holder = np.frombuffer(self._arena.view, np.uint8, size, offset)
        weakref.finalize(holder, self._released, offset)
        self.outstanding += 1
        return memoryview(cast(Any, holder))  # numpy exports the buffer

    def _released(self, offset: int) -> None:
        """The finalizer: in whatever thread dropped the last view (the loop's, in practice)."""
        self._freed.append(offset)
        if self._flush_scheduled or self.closed:
            return
        self._flush_scheduled = True
        try:
            if threading.get_ident() == self._thread:
                self._loop.call_soon(self._flush)
            else:
                self._loop.call_soon_threadsafe(self._flush)
        except RuntimeError:  # the loop is closed: the process is ending
            self.closed = True

    def _flush(self) -> None:
        self._flush_scheduled = False
        freed, self._freed = self._freed, []
        self.outstanding -= len(freed)
        if freed and not self.closed:
            self._send_free(freed)
