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
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

__all__ = [
    "HUGE_PAGES_OFF_ENV",
    "HUGE_PAGES_TUNABLE",
    "IDLE_TRIM_SECONDS",
    "KEEP_FREE_BYTES",
    "MMAP_THRESHOLD_BYTES",
    "TRIM_THRESHOLD_BYTES",
    "WARM_KEEP_FREE_BYTES",
    "HeapTrimmer",
    "WarmHeap",
    "after_failed_request",
    "after_large_success",
    "huge_page_tunables",
    "huge_pages_for_children",
    "reuse_freed_pages",
]

log = logging.getLogger(__name__)

#: Requests smaller than this leave too little behind to be worth a trim.
TRIM_THRESHOLD_BYTES = 16 * 1024 * 1024


def _glibc(name: str, *argtypes: type[ctypes._SimpleCData[Any]]) -> Any:
    """The C library's function ``name``, typed; None where it has none (musl, macOS)."""
    try:
        function = getattr(ctypes.CDLL(ctypes.util.find_library("c")), name)
    except (OSError, AttributeError, TypeError):
        return None
    function.argtypes = list(argtypes)
    function.restype = ctypes.c_int
    return function


def _glibc_trim() -> Callable[[], object] | None:
    """glibc's ``malloc_trim(0)``, or None where the C library has none."""
    trim = _glibc("malloc_trim", ctypes.c_size_t)
    return None if trim is None else lambda: trim(0)


#: Blocks up to this size come from the heap, so a freed one is reused by the next request
#: instead of being unmapped and faulted in again (glibc's default starts at 128 KiB).
#: glibc's largest (32 MiB): the buffers of a 16 MiB tensor's message (grpc's received
#: pieces and their join, the answer's join and grpc's copy of it, a REST body) come
#: from the heap too, warm while ``WarmHeap`` keeps it (decision 073).
MMAP_THRESHOLD_BYTES = 32 * 1024 * 1024
#: Free memory at the top of the heap kept for the next request rather than handed back.
KEEP_FREE_BYTES = 8 * 1024 * 1024
#: ... and while large requests succeed: what one 16 MiB request's buffers take, with room.
WARM_KEEP_FREE_BYTES = 96 * 1024 * 1024
#: Large requests that stop for this long hand the heap they kept back.
IDLE_TRIM_SECONDS = 5.0
_M_TRIM_THRESHOLD = -1  # mallopt parameters, from glibc's malloc.h
_M_MMAP_THRESHOLD = -3


def reuse_freed_pages() -> bool:
    """Every serving process calls this first: large tensors' buffers are reused, not
    handed back to the kernel after each request and faulted in again.

    glibc sizes its thresholds from what was last freed: once a 1 MiB buffer is freed the
    mmap threshold rises to 1 MiB and the trim threshold to 2 MiB, so every request with
    megabyte tensors grows the heap with brk, touches fresh pages (a fault per 4 KiB) and
    shrinks it again on free. Measured (identity, 1 MiB in and out, c=1, 2 frontends):
    five brk calls per request, a frontend spending 5.6-6.4 ms of CPU per request; with
    these two thresholds fixed, 2.7 ms, and 140-157 -> 277-280 requests/s. A process then
    keeps at most ``KEEP_FREE_BYTES`` of free heap; a large refused request is still
    handed back by ``after_failed_request`` (malloc_trim ignores the threshold), and
    tests/gateway/test_refused_memory.py holds (with 16 / 32 MiB it did not, once).
    False where the C library has no mallopt (not glibc). Decision 036."""
    mallopt = _glibc("mallopt", ctypes.c_int, ctypes.c_int)
    return mallopt is not None and bool(
        mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)
        and mallopt(_M_TRIM_THRESHOLD, KEEP_FREE_BYTES)
    )


#: glibc's tunable (2.35 and later) that asks for transparent huge pages behind malloc's
#: mapped blocks and heap growth (``MADV_HUGEPAGE``; the kernel's THP mode "madvise" or
#: "always" grants them). A fresh 16 MiB buffer then faults in 8 pages instead of 4,096:
#: copying 16 MiB into new memory took 1.6 ms instead of 7.7-12.5 ms here (decision 045).
#: Read by the C library at process start, so it is set for the processes a server
#: starts (``huge_pages_for_children``) and by scripts/serve.sh for the two it starts.
HUGE_PAGES_TUNABLE = "glibc.malloc.hugetlb=1"
#: ``SERVICE_MALLOC_HUGEPAGES=0`` leaves GLIBC_TUNABLES as it is.
HUGE_PAGES_OFF_ENV = "SERVICE_MALLOC_HUGEPAGES"


def huge_page_tunables(environ: Mapping[str, str]) -> str | None:
    """GLIBC_TUNABLES with huge-page malloc added to what ``environ`` has; None when
    nothing is to change (already chosen there, turned off, or not Linux)."""
    if environ.get(HUGE_PAGES_OFF_ENV, "1") == "0" or not sys.platform.startswith("linux"):
        return None
    current = environ.get("GLIBC_TUNABLES", "")
    if "glibc.malloc.hugetlb" in current:
        return None  # the user's own choice stands
    return f"{current}:{HUGE_PAGES_TUNABLE}" if current else HUGE_PAGES_TUNABLE


def huge_pages_for_children() -> None:
    """Every process started from now on (engine, frontends, model workers, gateway
    workers) gets huge-page malloc; this one keeps what it started with."""
    value = huge_page_tunables(os.environ)
    if value is not None:
        os.environ["GLIBC_TUNABLES"] = value


class HeapTrimmer:
    """Runs ``trim`` in a background thread after large failed requests; a request that
    fails while the thread runs restarts its schedule, never a second thread."""

    def __init__(
        self,
        trim: Callable[[], object] | None,
        threshold: int = TRIM_THRESHOLD_BYTES,
        delays: tuple[float, ...] = (0.25, 1.0),
        sleep: Callable[[float], object] = time.sleep,
        *,
        idle: bool = False,
    ) -> None:
        """``idle``: trim only after a whole delay without a call (``WarmHeap``: the heap
        is kept while large requests keep coming)."""
        self._trim = trim
        self._threshold = threshold
        self._delays = delays
        self._sleep = sleep
        self._idle = idle
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
            if self._idle:
                with self._lock:
                    again, self._again = self._again, False
                if again:  # not idle yet: a whole delay again
                    index, waited = 0, 0.0
                    continue
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


class WarmHeap:
    """While large requests succeed, the heap their buffers free is kept for the next one
    (the trim threshold raised to ``WARM_KEEP_FREE_BYTES``): a 16 MiB gRPC request then
    reuses warm pages for each of its buffers instead of growing the heap, faulting and
    zeroing it, and shrinking it again (a frontend's loop 27 -> 14 ms a request; decision
    073). A failed large request lowers the threshold again at once, so its buffers,
    freed after, go back (a refused oversized request leaves no process larger); large
    requests that stop for ``IDLE_TRIM_SECONDS`` hand the kept heap back."""

    def __init__(
        self,
        keep: Callable[[int], object] | None,
        trim: Callable[[], object] | None,
        threshold: int = TRIM_THRESHOLD_BYTES,
        idle_seconds: float = IDLE_TRIM_SECONDS,
        sleep: Callable[[float], object] = time.sleep,
    ) -> None:
        self._keep = keep
        self._trim = trim
        self._threshold = threshold
        self._lock = threading.Lock()
        self.warm = False
        self._idle = HeapTrimmer(
            self._cool_and_trim, threshold, delays=(idle_seconds,), sleep=sleep, idle=True
        )

    def succeeded(self, nbytes: int) -> None:
        if nbytes < self._threshold or self._keep is None:
            return
        with self._lock:
            if not self.warm:
                self._keep(WARM_KEEP_FREE_BYTES)
                self.warm = True
        self._idle.after_failed_request(nbytes)

    def cool(self) -> None:
        with self._lock:
            if self.warm and self._keep is not None:
                self._keep(KEEP_FREE_BYTES)
            self.warm = False

    def _cool_and_trim(self) -> None:
        self.cool()
        if self._trim is not None:
            self._trim()


def _glibc_keep() -> Callable[[int], object] | None:
    """glibc's ``mallopt(M_TRIM_THRESHOLD, n)``, or None where there is none."""
    mallopt = _glibc("mallopt", ctypes.c_int, ctypes.c_int)
    return None if mallopt is None else lambda size: mallopt(_M_TRIM_THRESHOLD, size)


_TRIMMER = HeapTrimmer(_glibc_trim())
_WARM = WarmHeap(_glibc_keep(), _glibc_trim())


def after_failed_request(nbytes: int) -> None:
    """Called by a frontend or the gateway when a request of ``nbytes`` bytes was refused or
    failed."""
    if nbytes >= TRIM_THRESHOLD_BYTES:
        _WARM.cool()
    _TRIMMER.after_failed_request(nbytes)


def after_large_success(nbytes: int) -> None:
    """Called by a gRPC frontend or the gateway when a request of ``nbytes`` (from
    ``TRIM_THRESHOLD_BYTES``) succeeded: the heap stays warm for the next one."""
    _WARM.succeeded(nbytes)
