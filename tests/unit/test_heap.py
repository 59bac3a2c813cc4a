"""HeapTrimmer: trims only after large failures, in one thread, on its delay schedule."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest

from wire.heap import (
    HUGE_PAGES_TUNABLE,
    KEEP_FREE_BYTES,
    WARM_KEEP_FREE_BYTES,
    HeapTrimmer,
    WarmHeap,
    huge_page_tunables,
    huge_pages_for_children,
)


class _Recorder:
    """A fake trim and sleep: records the order of events, and can hold the thread."""

    def __init__(self) -> None:
        self.events: list[str] = []
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.gate = threading.Event()
        self.gate.set()

    def trim(self) -> None:
        with self.lock:
            self.events.append("trim")

    def sleep(self, seconds: float) -> None:
        self.gate.wait(10)
        with self.lock:
            self.events.append(f"sleep {seconds:g}")


def _wait_idle(trimmer: HeapTrimmer) -> None:
    for thread in threading.enumerate():
        if thread.name == "heap-trim":
            thread.join(10)
    assert not trimmer._running


def test_small_failures_never_trim() -> None:
    rec = _Recorder()
    trimmer = HeapTrimmer(rec.trim, threshold=1000, sleep=rec.sleep)
    trimmer.after_failed_request(999)
    _wait_idle(trimmer)
    assert rec.events == []


def test_a_large_failure_trims_after_each_delay() -> None:
    rec = _Recorder()
    trimmer = HeapTrimmer(rec.trim, threshold=1000, delays=(0.25, 1.0), sleep=rec.sleep)
    trimmer.after_failed_request(1000)
    _wait_idle(trimmer)
    assert rec.events == ["sleep 0.25", "trim", "sleep 0.75", "trim"]


def test_failures_while_running_restart_the_schedule_in_the_same_thread() -> None:
    rec = _Recorder()
    rec.gate.clear()  # hold the thread in its first sleep
    trimmer = HeapTrimmer(rec.trim, threshold=10, delays=(0.25, 1.0), sleep=rec.sleep)
    trimmer.after_failed_request(10)
    trimmer.after_failed_request(50)  # while it waits: no second thread
    trimmer.after_failed_request(50)
    assert sum(t.name == "heap-trim" for t in threading.enumerate()) == 1
    rec.gate.set()
    _wait_idle(trimmer)
    assert rec.events == ["sleep 0.25", "trim", "sleep 0.25", "trim", "sleep 0.75", "trim"]


def test_without_malloc_trim_nothing_runs() -> None:
    trimmer = HeapTrimmer(None, threshold=1)
    trimmer.after_failed_request(1 << 30)
    assert not trimmer._running


_FAULTS = """
import resource, sys
from wire.heap import reuse_freed_pages
if sys.argv[1] == "fixed":
    assert reuse_freed_pages()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for i in range(200):  # a request's megabyte buffers, a little larger each time
    a = b"a" * ((1 << 20) + 4096 * i)
    del a
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _page_faults(mode: str) -> int:
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", _FAULTS, mode], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return int(done.stdout)


def test_freed_megabyte_buffers_are_reused_not_faulted_in_again() -> None:
    """With glibc's own thresholds a buffer a little larger than the last one freed is
    mapped afresh and faulted in (256 pages a MiB); with the serving processes'
    (reuse_freed_pages) the freed heap is reused."""
    default, fixed = _page_faults("default"), _page_faults("fixed")
    assert fixed * 10 < default, (fixed, default)


def test_huge_page_malloc_is_added_to_the_tunables_children_get() -> None:
    assert huge_page_tunables({}) == HUGE_PAGES_TUNABLE
    both = huge_page_tunables({"GLIBC_TUNABLES": "glibc.malloc.arena_max=2"})
    assert both == f"glibc.malloc.arena_max=2:{HUGE_PAGES_TUNABLE}"
    assert huge_page_tunables({"GLIBC_TUNABLES": "glibc.malloc.hugetlb=0"}) is None  # theirs
    assert huge_page_tunables({"SERVICE_MALLOC_HUGEPAGES": "0"}) is None


def test_huge_pages_for_children_sets_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GLIBC_TUNABLES", raising=False)
    monkeypatch.delenv("SERVICE_MALLOC_HUGEPAGES", raising=False)
    huge_pages_for_children()
    assert os.environ["GLIBC_TUNABLES"] == "glibc.malloc.hugetlb=1"
    child = subprocess.run(
        [sys.executable, "-c", "import os; print(os.environ['GLIBC_TUNABLES'])"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert child.stdout.strip() == "glibc.malloc.hugetlb=1"


def test_the_heap_stays_warm_while_large_requests_succeed() -> None:
    """A large success raises the trim threshold once; each one restarts the idle wait;
    once they stop for a whole delay the threshold goes back down and the heap is
    trimmed; a failure lowers it at once (its buffers, freed after, go back)."""
    rec = _Recorder()
    rec.gate.clear()  # hold the idle thread in its first wait
    keeps: list[int] = []
    heap = WarmHeap(keeps.append, rec.trim, threshold=10, idle_seconds=5.0, sleep=rec.sleep)
    heap.succeeded(9)  # small: nothing
    assert keeps == [] and not heap.warm
    heap.succeeded(10)
    heap.succeeded(10)  # during the wait: the wait starts again, no second raise
    assert keeps == [WARM_KEEP_FREE_BYTES] and heap.warm
    rec.gate.set()
    _wait_idle(heap._idle)
    assert rec.events == ["sleep 5", "sleep 5", "trim"]
    assert keeps == [WARM_KEEP_FREE_BYTES, KEEP_FREE_BYTES] and not heap.warm
    heap.succeeded(10)
    heap.cool()  # a large request failed
    assert keeps[-2:] == [WARM_KEEP_FREE_BYTES, KEEP_FREE_BYTES] and not heap.warm
    _wait_idle(heap._idle)
