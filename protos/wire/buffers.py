"""Receive buffers for large payloads, not zero-filled before the socket fills them.

``bytearray(n)`` writes n zero bytes before anything is received into it: for a large
tensor that is a whole pass over memory, and the pass that faults every page in, before
``recv_into`` writes the same bytes again (the REST gateway's profile at 64 MiB: a fifth
of its time in that memset; decision 073). The C API's
``PyByteArray_FromStringAndSize(NULL, n)`` allocates without writing: a large block is
fresh zero pages from the kernel (glibc maps it), faulted in by the first write, which is
the receive itself. A client that declares a large body and sends little then also
commits only what it sent.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable

__all__ = ["receive_buffer"]


def _uninitialized() -> Callable[[int], bytearray] | None:
    """CPython's allocator of a bytearray with unwritten contents; None elsewhere."""
    try:
        make = ctypes.pythonapi.PyByteArray_FromStringAndSize
    except (AttributeError, OSError):  # not CPython
        return None
    make.argtypes = [ctypes.c_void_p, ctypes.c_ssize_t]
    make.restype = ctypes.py_object

    def allocate(size: int) -> bytearray:
        buffer: bytearray = make(None, size)
        return buffer

    return allocate


def _physical_bytes() -> int:
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return 1 << 62


_ALLOCATE = _uninitialized()
#: Above this, ``bytearray(size)`` (a size malloc may refuse: CPython's C call then
#: reports a spurious SystemError beside the MemoryError; bytearray raises it cleanly).
_LARGEST = _physical_bytes()


def receive_buffer(size: int) -> bytearray:
    """A bytearray of ``size`` bytes whose contents are whatever the allocator had (fresh
    zero pages for a large one): fill all of it before reading any."""
    if _ALLOCATE is None or size <= 0 or size >= _LARGEST:
        return bytearray(size)
    return _ALLOCATE(size)
