"""System (POSIX) shared-memory regions: opened by key, mapped once, viewed without copies.

Registration follows Triton's ``RegisterSystemSharedMemory``: ``shm_open(key, O_RDWR)``
(libc's name rules, so a key with a ``/`` inside is refused by the C library, never
resolved as a path), the region must lie inside the object (``fstat``), and
``offset .. offset + byte_size`` is mapped shared, read-write, with the server's own
permissions; the descriptor is closed at once. The server never creates, resizes or
unlinks the object: that stays with the client that created it.

Unlike Triton, an offset that is not a multiple of the page size is accepted (the mapping
starts at the page below it).
"""

from __future__ import annotations

import logging
import mmap
import os
from typing import Any

import numpy as np

from ..errors import Internal, InvalidArgument

try:  # CPython's own binding of shm_open (what multiprocessing.shared_memory uses)
    import _posixshmem
except ImportError:  # pragma: no cover - non-POSIX builds
    _posixshmem = None

__all__ = ["SystemRegion", "open_system_region"]

log = logging.getLogger(__name__)


class SystemRegion:
    """A registered system region: its mapping and the part of it clients address."""

    kind = "system"
    device_id = 0

    def __init__(
        self, name: str, key: str, offset: int, byte_size: int, mapping: mmap.mmap, skip: int
    ) -> None:
        self.name = name
        self.key = key
        self.offset = offset
        self.byte_size = byte_size
        self.uses = 0  # requests holding the region (see registry.acquire)
        self._mapping = mapping
        self._view: memoryview | None = memoryview(mapping)[skip : skip + byte_size]

    def _region(self) -> memoryview:
        if self._view is None:
            raise Internal(f"shared memory region '{self.name}' is no longer mapped")
        return self._view

    def read(self, offset: int, size: int) -> memoryview:
        """The bytes at ``offset`` as a view of the mapping: no copy. The view keeps the
        mapping alive, so it never reads unmapped memory even after unregistration."""
        return self._region()[offset : offset + size]

    def write(self, offset: int, data: Any) -> None:
        """``data``: bytes, or a numeric numpy array copied in C order straight into the
        mapping (no intermediate contiguous copy)."""
        target = self._region()
        if isinstance(data, np.ndarray):
            dest = np.frombuffer(target, np.uint8, data.nbytes, offset)
            np.copyto(dest.view(data.dtype).reshape(data.shape), data, casting="no")
        else:
            target[offset : offset + len(data)] = data

    def close(self) -> None:
        """Unmap now, or (while a request still holds a view) when the last view goes."""
        view, self._view = self._view, None
        if view is not None:
            view.release()
        try:
            self._mapping.close()
        except BufferError:
            log.debug("region '%s' still viewed: unmapped once its views are gone", self.name)


def _shm_open(key: str) -> int:
    if _posixshmem is not None:
        return int(_posixshmem.shm_open(key, os.O_RDWR, 0o600))
    raise OSError("POSIX shared memory is not available on this platform")  # pragma: no cover


def open_system_region(name: str, key: str, offset: int, byte_size: int) -> SystemRegion:
    """Open and map ``key`` (Triton's texts and codes for every failure)."""
    try:
        fd = _shm_open(key)
    except (OSError, ValueError) as exc:
        log.debug("shm_open(%r) failed: %s", key, exc)
        raise Internal(f"Unable to open shared memory region: '{key}'") from None
    try:
        try:
            size = os.fstat(fd).st_size
        except OSError:
            raise Internal(f"Invalid shared memory region: '{key}'") from None
        if offset + byte_size > size:
            raise InvalidArgument(f"failed to register shared memory region '{name}': invalid args")
        if byte_size == 0:  # mmap(2) refuses a zero length; Triton reports it so
            raise InvalidArgument(
                f"failed to register shared memory region '{name}': "
                "unable to process address spaceInvalid argument"
            )
        skip = offset % mmap.ALLOCATIONGRANULARITY
        try:
            mapping = mmap.mmap(
                fd,
                byte_size + skip,
                flags=mmap.MAP_SHARED,
                prot=mmap.PROT_READ | mmap.PROT_WRITE,
                offset=offset - skip,
            )
        except (OSError, OverflowError, ValueError) as exc:
            reason = getattr(exc, "strerror", None) or str(exc)
            raise InvalidArgument(
                f"failed to register shared memory region '{name}': "
                f"unable to process address space{reason}"
            ) from None
    finally:
        os.close(fd)
    return SystemRegion(name, key, offset, byte_size, mapping, skip)
