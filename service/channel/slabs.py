"""Shared-memory slabs between a frontend process and the engine.

Each direction has one arena, an anonymous memory file (``memfd``: nothing left in
``/dev/shm`` when a process dies) that its writer allocates in and its reader maps:
request inputs go into the frontend's arena, outputs into the arena the engine keeps for
that frontend. The writer's allocator is local to its process (no cross-process lock):
blocks come in power-of-two size classes, carved from the top of the arena and reused
from per-class free lists, so pages touched once stay mapped and warm. A tensor that
does not fit (larger than a quarter of the arena, or the arena full) travels inside the
frame instead, so nothing ever fails for want of slab space.
"""

from __future__ import annotations

import asyncio
import contextlib
import mmap
import os
import time

import numpy as np

from ..backends.python.shm import anonymous_fd

__all__ = ["DEFAULT_ARENA_BYTES", "INLINE_MAX", "Arena", "ArenaMap", "warm_seconds"]

#: Per arena (virtual: pages cost memory only once touched). A block is at most a
#: quarter of it, and a tensor no block holds rides inside the pickled frame (copied
#: four more times): 4 GiB keeps tensors up to 1 GiB in blocks (256 MiB arenas sent a
#: 256 MiB identity's tensors through the frames: 1.5 s of a frontend's CPU for it).
DEFAULT_ARENA_BYTES = 4 << 30
#: Tensors up to this size ride inside the frame: copying them is cheaper than a block.
INLINE_MAX = 16 << 10
_MIN_CLASS = (INLINE_MAX + 1 - 1).bit_length()  # smallest block: 32 KiB
#: Blocks of 16 MiB and more give their pages back once freed (``MADV_REMOVE`` punches
#: them out of the memory file): a rare large tensor must not leave both processes that
#: map the arena that much larger; smaller blocks stay warm for reuse.
_RELEASE_CLASS = 24
#: ... but not at once: a freed large block keeps its pages for a while (when its writer
#: runs on an event loop), so that a stream of large tensors reuses them warm instead of
#: faulting every page in again in both processes (loadtest cost-budget, 64 MiB: the
#: copies into fresh blocks led the frontend's and the engine's profiles; a cold copy
#: costs five to seven times a warm one). At least this long:
WARM_SECONDS = 0.5
#: ... and as long as moving the block's bytes at this rate takes: the next tensor of a
#: client sending them one at a time comes about a round trip later, and a round trip
#: grows with the size (tritonclient, 2 cores: 64 MiB 0.6 s, 256 MiB 2-4 s). 16 MiB
#: keeps its pages 0.5 s, 64 MiB 2 s, 256 MiB 8 s, 1 GiB 32 s (decision 073). A block
#: whose request failed gives them back at once (``free(..., keep_warm=False)``).
WARM_BYTES_PER_SECOND = 32 << 20
_REMOVE = getattr(mmap, "MADV_REMOVE", getattr(mmap, "MADV_DONTNEED", 4))


def warm_seconds(block_bytes: int) -> float:
    """How long a freed large block of ``block_bytes`` keeps its pages."""
    return max(WARM_SECONDS, block_bytes / WARM_BYTES_PER_SECOND)


class Arena:
    """Writer side: allocates blocks in a memfd it created; ``fd`` goes to the reader."""

    def __init__(self, size: int = DEFAULT_ARENA_BYTES, name: str = "tensor-slab") -> None:
        self.size = size
        self.fd = anonymous_fd(size)
        self.memory = mmap.mmap(self.fd, size, flags=mmap.MAP_SHARED)
        self.view = memoryview(self.memory)
        self._top = 0
        self._free: dict[int, list[int]] = {}
        self._class_of: dict[int, int] = {}  # offset -> size class of a block in use
        self._max_class = max(_MIN_CLASS, (size // 4).bit_length() - 1)
        self.in_use = 0  # bytes in allocated blocks
        #: Free large blocks whose pages are kept for now: offset -> (class, release time).
        self._warm: dict[int, tuple[int, float]] = {}
        self._release: asyncio.TimerHandle | None = None
        self._release_at = 0.0  # when ``_release`` runs

    @property
    def blocks_in_use(self) -> int:
        return len(self._class_of)

    @property
    def carved(self) -> int:
        """Bytes ever carved from the arena: bounded by the peak of concurrent use."""
        return self._top

    def alloc(self, nbytes: int) -> int:
        """A block of at least ``nbytes``: its offset, or -1 when none is free."""
        cls = max(_MIN_CLASS, (nbytes - 1).bit_length())
        if cls > self._max_class:
            return -1
        free = self._free.get(cls)
        if free:
            offset = free.pop()
            if cls >= _RELEASE_CLASS:
                self._warm.pop(offset, None)
        elif self._top + (1 << cls) <= self.size:
            offset = self._top
            self._top += 1 << cls
        else:
            offset = self._larger(cls)
            if offset < 0:
                return -1
            cls = self._class_of.pop(offset)
        self._class_of[offset] = cls
        self.in_use += 1 << cls
        return offset

    def _larger(self, cls: int) -> int:
        """Arena carved to the top: lend a free block of a larger class, whole."""
        for bigger in range(cls + 1, self._max_class + 1):
            free = self._free.get(bigger)
            if free:
                offset = free.pop()
                self._warm.pop(offset, None)
                self._class_of[offset] = bigger
                return offset
        return -1

    def free(self, offset: int, *, keep_warm: bool = True) -> None:
        """``keep_warm=False``: a large block's pages go back now (its request failed: a
        refused oversized tensor must not keep memory for the next one)."""
        cls = self._class_of.pop(offset)
        self.in_use -= 1 << cls
        self._free.setdefault(cls, []).append(offset)
        if cls >= _RELEASE_CLASS:  # a large block's pages go back (in every mapping)
            loop = None
            if keep_warm:
                with contextlib.suppress(RuntimeError):  # no loop to come back later: now
                    loop = asyncio.get_running_loop()
            if loop is None:
                self.memory.madvise(_REMOVE, offset, 1 << cls)
                return
            release_at = time.monotonic() + warm_seconds(1 << cls)
            self._warm[offset] = (cls, release_at)
            if self._release is None or release_at < self._release_at:
                self._schedule(loop, release_at)

    def _schedule(self, loop: asyncio.AbstractEventLoop, when: float) -> None:
        """The release runs at ``when`` (``time.monotonic``), replacing a later one."""
        if self._release is not None:
            self._release.cancel()
        self._release_at = when
        delay = max(0.0, when - time.monotonic())
        self._release = loop.call_later(delay, self._release_idle, loop)

    def _release_idle(self, loop: asyncio.AbstractEventLoop) -> None:
        """Give back the pages of the large blocks whose warm time is over; come back
        when the next one's is."""
        self._release = None
        if self.memory.closed:
            return
        now = time.monotonic()
        for offset, (cls, release_at) in list(self._warm.items()):
            if release_at <= now:
                del self._warm[offset]
                self.memory.madvise(_REMOVE, offset, 1 << cls)
        if self._warm:
            self._schedule(loop, min(release_at for _, release_at in self._warm.values()))

    @property
    def warm_bytes(self) -> int:
        """Bytes of free large blocks whose pages are still kept."""
        return sum(1 << cls for cls, _ in self._warm.values())

    def write(self, offset: int, data: bytes | memoryview) -> None:
        self.view[offset : offset + len(data)] = data

    def close(self) -> None:
        if self._release is not None:
            self._release.cancel()
            self._release = None
        self.view.release()
        with contextlib.suppress(BufferError):  # a view still exists: GC unmaps it later
            self.memory.close()
        os.close(self.fd)


class ArenaMap:
    """Reader side: the peer's arena, mapped from the fd it sent; blocks are views."""

    def __init__(self, fd: int, size: int, *, writable: bool = False) -> None:
        try:
            prot = mmap.PROT_READ | (mmap.PROT_WRITE if writable else 0)
            self.memory = mmap.mmap(fd, size, flags=mmap.MAP_SHARED, prot=prot)
        finally:
            os.close(fd)
        self.view = memoryview(self.memory)
        #: Where the mapping starts in this process (``offset_of``).
        self.address = np.frombuffer(self.memory, np.uint8, 1).__array_interface__["data"][0]

    def offset_of(self, address: int) -> int:
        """The offset in the arena of memory at ``address`` of this process (an array's
        data), or -1 where it lies outside the mapping."""
        offset = address - self.address
        return offset if 0 <= offset < len(self.memory) else -1

    def block(self, offset: int, nbytes: int) -> memoryview:
        return self.view[offset : offset + nbytes]

    def close(self) -> None:
        """Drop the mapping; views still held (a model thread reading inputs) keep the
        memory alive until they are gone."""
        with contextlib.suppress(BufferError):
            self.view.release()
            self.memory.close()
