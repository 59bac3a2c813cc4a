"""Shared-memory regions for large tensors: the sender's pool and the receiver's mappings.

A region is an anonymous memory file (``memfd``): it has no name, so nothing is left in
``/dev/shm`` when a process dies, and no resource-tracker process is needed. The sender
writes a message's large tensors into one region and sends its descriptor the first time
the region is used; both sides keep their mapping, so later uses cost neither a syscall nor
page faults (fresh pages are what makes one-shot shared memory slow: see
docs/decisions/013-python-models-worker-processes.md). The receiver hands out numpy views
of the region; when the last view is garbage collected it notes the region as released,
and that note rides on its next message back, after which the sender may reuse the region.
Regions are sized in powers of two (1 MiB and up; Triton's ``shm-default-byte-size`` and
``shm-growth-byte-size`` change both) within a per-pool byte budget; past the
budget a message gets a one-shot region that dies with its views.
"""

from __future__ import annotations

import contextlib
import itertools
import mmap
import os
import tempfile
import threading
import weakref
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

__all__ = ["DEFAULT_POOL_BYTES", "MIN_REGION", "Lease", "RegionInfo", "RegionMaps", "RegionPool"]

DEFAULT_POOL_BYTES = 256 << 20
MIN_REGION = 1 << 20
_POPULATE = getattr(mmap, "MAP_POPULATE", 0)
_NONE: list[int] = []  # what ``take_*`` return when there is nothing: never appended to


class RegionInfo(NamedTuple):
    id: int  # 0: one-shot (not pooled)
    size: int


class Lease(NamedTuple):
    info: RegionInfo
    memory: mmap.mmap
    fd: int | None  # to send with the message (the sender closes it after sending)
    one_shot: bool  # the sender unmaps right after writing


def anonymous_fd(size: int) -> int:
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create("python-backend-tensors", os.MFD_CLOEXEC)
    else:  # pragma: no cover - non-Linux fallback: an unlinked temporary file
        with tempfile.TemporaryFile() as handle:
            fd = os.dup(handle.fileno())
    try:
        os.ftruncate(fd, size)
    except OSError:
        os.close(fd)
        raise
    return fd


def _map(fd: int, size: int) -> mmap.mmap:
    return mmap.mmap(fd, size, flags=mmap.MAP_SHARED | _POPULATE)


class _Region:
    __slots__ = ("busy", "memory", "size")

    def __init__(self, memory: mmap.mmap, size: int) -> None:
        self.memory = memory
        self.size = size
        self.busy = True


class RegionPool:
    """Sender side. Thread-safe."""

    def __init__(
        self, budget: int = DEFAULT_POOL_BYTES, smallest: int = MIN_REGION, growth: int = 0
    ) -> None:
        """``smallest``: the size of the smallest region (``--backend-config
        python,shm-default-byte-size``); ``growth``: when set (``shm-growth-byte-size``),
        larger regions are ``smallest`` plus whole steps of it, else powers of two."""
        self._budget = budget
        self._smallest = smallest
        self._growth = growth
        self._lock = threading.Lock()
        self._regions: dict[int, _Region] = {}
        self._total = 0
        self._ids = itertools.count(1)
        self._dropped: list[int] = []

    def acquire(self, size: int) -> Lease:
        capacity = self.capacity(size)
        with self._lock:
            fits = [(r.size, i) for i, r in self._regions.items() if not r.busy and r.size >= size]
            if fits:
                _, region_id = min(fits)
                region = self._regions[region_id]
                region.busy = True
                return Lease(RegionInfo(region_id, region.size), region.memory, None, False)
            self._evict(capacity)
            pooled = self._total + capacity <= self._budget
            if pooled:
                self._total += capacity  # reserved now, so concurrent senders see it
        length = capacity if pooled else size
        fd = anonymous_fd(length)
        try:
            memory = _map(fd, length)
        except BaseException:
            os.close(fd)
            if pooled:
                with self._lock:
                    self._total -= capacity
            raise
        if not pooled:
            return Lease(RegionInfo(0, length), memory, fd, True)
        region_id = next(self._ids)
        with self._lock:
            self._regions[region_id] = _Region(memory, capacity)
        return Lease(RegionInfo(region_id, capacity), memory, fd, False)

    def capacity(self, size: int) -> int:
        """The size of a pooled region that holds ``size`` bytes."""
        if size <= self._smallest:
            return self._smallest
        if self._growth:
            steps = -(-(size - self._smallest) // self._growth)
            return self._smallest + steps * self._growth
        return max(self._smallest, 1 << (size - 1).bit_length())

    def _evict(self, needed: int) -> None:
        """Unmap free regions, largest first, until ``needed`` more bytes fit (lock held)."""
        free = sorted(((r.size, i) for i, r in self._regions.items() if not r.busy), reverse=True)
        for size, region_id in free:
            if self._total + needed <= self._budget:
                return
            self._regions.pop(region_id).memory.close()
            self._total -= size
            self._dropped.append(region_id)

    def release(self, ids: list[int]) -> None:
        if not ids:
            return
        with self._lock:
            for region_id in ids:
                region = self._regions.get(region_id)
                if region is not None:
                    region.busy = False

    def take_dropped(self) -> list[int]:
        if not self._dropped:  # the usual case, without the lock (a list's truth is atomic)
            return _NONE
        with self._lock:
            dropped, self._dropped = self._dropped, []
        return dropped

    def close(self) -> None:
        with self._lock:
            for region in self._regions.values():
                with contextlib.suppress(BufferError):
                    region.memory.close()
            self._regions.clear()


class RegionMaps:
    """Receiver side: the pooled regions mapped so far, and which ones were released."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._maps: dict[int, mmap.mmap] = {}
        self._released: list[int] = []

    def root(self, info: RegionInfo, fd: int | None) -> npt.NDArray[np.uint8]:
        """A byte array over the region; every tensor view of a message derives from it,
        so the region counts as released once all of them are gone."""
        if fd is not None:
            try:
                memory = _map(fd, info.size)
            finally:
                os.close(fd)
            if info.id:
                with self._lock:
                    self._maps[info.id] = memory
        else:
            with self._lock:
                found = self._maps.get(info.id)
            if found is None:
                raise ValueError(f"shared region {info.id} is not mapped here")
            memory = found
        root = np.frombuffer(memory, dtype=np.uint8, count=info.size)
        if info.id:
            weakref.finalize(root, self._release, info.id)
        return root

    def _release(self, region_id: int) -> None:
        with self._lock:
            self._released.append(region_id)

    def take_released(self) -> list[int]:
        if not self._released:  # the usual case, without the lock (a list's truth is atomic)
            return _NONE
        with self._lock:
            released, self._released = self._released, []
        return released

    def drop(self, ids: list[int]) -> None:
        if not ids:
            return
        with self._lock:
            memories = [self._maps.pop(i) for i in ids if i in self._maps]
        for memory in memories:
            with contextlib.suppress(BufferError):
                memory.close()

    def close(self) -> None:
        with self._lock:
            memories = list(self._maps.values())
            self._maps.clear()
        for memory in memories:
            with contextlib.suppress(BufferError):
                memory.close()
