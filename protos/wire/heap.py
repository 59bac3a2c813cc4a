"""Handing the heap a large refused request grew back to the operating system.

gRPC receives a large message as many small buffers, each far below glibc's mmap
threshold, so they come from the heap. Once freed, glibc keeps those pages (the top of
the heap is rarely free, so ``free`` cannot shrink it), and RSS stays hundreds of MB
above the baseline after a refused 300 MB request. ``malloc_trim`` returns them; it takes
10-75 ms on such a heap, so it runs in a thread of its own, one at a time, and only after
a request at least ``threshold`` bytes large failed. The request's buffers are freed a
moment after its error is known (once the status is sent), so the thread trims after
``delays`` (a short one, and a longer one in case the event loop was busy); a failure in
the meantime starts the schedule again. The gRPC frontends and the REST gateway both call
it (the gateway's handler threads leave a large body in their own malloc arenas).
Figures: docs/decisions/024-hostile-input.md.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import threading
import time
from collections.abc import Callable

__all__ = ["TRIM_THRESHOLD_BYTES", "HeapTrimmer", "after_failed_request"]

log = logging.getLogger(__name__)

#: Requests smaller than this leave too little behind to be worth a trim.
TRIM_THRESHOLD_BYTES = 16 * 1024 * 1024


def _glibc_trim() -> Callable[[], object] | None:
    """glibc's ``malloc_trim(0)``, or None where the C library has none (musl, macOS)."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        trim = libc.malloc_trim
    except (OSError, AttributeError, TypeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return lambda: trim(0)


class HeapTrimmer:
    """Runs ``trim`` in a background thread after large failed requests; a request that
    fails while the thread runs restarts its schedule, never a second thread."""

    def __init__(
        self,
        trim: Callable[[], object] | None,
        threshold: int = TRIM_THRESHOLD_BYTES,
        delays: tuple[float, ...] = (0.25, 1.0),
        sleep: Callable[[float], object] = time.sleep,
    ) -> None:
        self._trim = trim
        self._threshold = threshold
        self._delays = delays
        self._sleep = sleep
        self._lock = threading.Lock()
        self._running = False
        self._again = False

    def after_failed_request(self, nbytes: int) -> None:
        if nbytes < self._threshold or self._trim is None:
            return
        with self._lock:
            if self._running:
                self._again = True
                return
            self._running = True
        threading.Thread(target=self._run, name="heap-trim", daemon=True).start()

    def _run(self) -> None:
        assert self._trim is not None
        waited = 0.0
        index = 0
        while True:
            self._sleep(self._delays[index] - waited)
            waited = self._delays[index]
            try:
                self._trim()
            except Exception:  # pragma: no cover - malloc_trim does not raise
                log.exception("malloc_trim failed")
            with self._lock:
                if self._again:  # another large failure: start the schedule again
                    self._again = False
                    index, waited = 0, 0.0
                    continue
                index += 1
                if index == len(self._delays):
                    self._running = False
                    return


_TRIMMER = HeapTrimmer(_glibc_trim())


def after_failed_request(nbytes: int) -> None:
    """Called by a frontend or the gateway when a request of ``nbytes`` bytes was refused or
    failed."""
    _TRIMMER.after_failed_request(nbytes)
