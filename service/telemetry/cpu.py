"""CPU metrics in Triton's names (``nv_cpu_utilization``, ``nv_cpu_memory_*_bytes``), from /proc.

Computed as Triton computes them, so dashboards built on Triton read the same numbers:
utilisation is the share of non-idle jiffies (user, nice, system, irq, softirq, steal)
among all jiffies (those plus idle and iowait) summed over every CPU between two
readings of /proc/stat's aggregate ``cpu`` line; used memory is MemTotal - MemAvailable
from /proc/meminfo. No labels: one value for the host (or the container's view of it).

A daemon thread (``poller.IntervalPoller``) reads /proc every ``--metrics-interval-ms``
and a scrape renders the last snapshot, so a scrape never touches /proc. Utilisation
needs two readings: it appears after the first interval, rather than as a made-up 0.
Elsewhere than Linux, or where /proc cannot be read or parsed, no CPU metric is exported
and one INFO line says why. The readers are injectable so tests can feed fixed texts.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from pathlib import Path

from .metrics import format_number
from .poller import IntervalPoller

__all__ = ["CpuMetrics", "cpu_utilization", "parse_meminfo", "parse_stat"]

log = logging.getLogger(__name__)

_UTILIZATION = "nv_cpu_utilization"
_MEMORY_TOTAL = "nv_cpu_memory_total_bytes"
_MEMORY_USED = "nv_cpu_memory_used_bytes"
# (family, HELP): Triton's gauges, in its order.
_FAMILIES = (
    (_UTILIZATION, "CPU utilization rate [0.0 - 1.0]"),
    (_MEMORY_TOTAL, "CPU total memory (RAM), in bytes"),
    (_MEMORY_USED, "CPU used memory (RAM), in bytes"),
)
# /proc/stat's first eight counters: user nice system idle iowait irq softirq steal.
# guest and guest_nice (9th, 10th) are already counted in user and nice.
_COUNTERS = 8
_IDLE, _IOWAIT = 3, 4


def parse_stat(text: str) -> tuple[int, ...]:
    """The aggregate ``cpu`` line's eight counters (jiffies over all CPUs); ValueError when
    the text does not start with it. Kernels too old for iowait..steal count them as 0."""
    fields = text.split("\n", 1)[0].split()
    if not fields or fields[0] != "cpu":
        raise ValueError("no aggregate 'cpu' line at the top of /proc/stat")
    counters = [int(v) for v in fields[1 : 1 + _COUNTERS]]
    if len(counters) < 4:
        raise ValueError("the 'cpu' line of /proc/stat has fewer than 4 counters")
    return (*counters, *[0] * (_COUNTERS - len(counters)))


def cpu_utilization(new: tuple[int, ...], old: tuple[int, ...]) -> float | None:
    """Non-idle share of the jiffies between two readings; None when none elapsed.

    A counter that went backwards contributes 0 (Triton's guard against wrap-around).
    """
    deltas = [max(0, a - b) for a, b in zip(new, old, strict=True)]
    total = sum(deltas)
    if total == 0:
        return None
    return (total - deltas[_IDLE] - deltas[_IOWAIT]) / total


def parse_meminfo(text: str) -> tuple[int, int]:
    """(total, used) bytes: MemTotal and MemTotal - MemAvailable (kB in the file).

    ValueError when either is missing (kernels before 3.14 have no MemAvailable) or
    MemAvailable exceeds MemTotal, as Triton refuses them too.
    """
    kb: dict[str, int] = {}
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        if name in ("MemTotal", "MemAvailable"):
            value = rest.split()
            if not value:
                raise ValueError(f"{name} has no value in /proc/meminfo")
            kb[name] = int(value[0])
    if len(kb) != 2:
        raise ValueError("MemTotal or MemAvailable missing from /proc/meminfo")
    total, available = kb["MemTotal"] * 1024, kb["MemAvailable"] * 1024
    if available > total:
        raise ValueError("MemAvailable exceeds MemTotal in /proc/meminfo")
    return total, total - available


def read_proc_stat() -> str:
    """Only the first line: the per-CPU and interrupt lines below it can be long."""
    with open("/proc/stat", encoding="ascii") as stat:
        return stat.readline()


def read_proc_meminfo() -> str:
    return Path("/proc/meminfo").read_text(encoding="ascii")


class CpuMetrics(IntervalPoller):
    """Polls /proc in a daemon thread; ``render`` gives the last snapshot as exposition text.

    ``start`` (reads /proc once, for the utilisation baseline and memory) returns whether
    CPU metrics are exported; when it returns False, ``render`` returns "" forever.
    """

    def __init__(
        self,
        interval_s: float = 2.0,
        read_stat: Callable[[], str] = read_proc_stat,
        read_meminfo: Callable[[], str] = read_proc_meminfo,
        platform: str = sys.platform,
    ) -> None:
        super().__init__(interval_s, "cpu-metrics")
        self._read_stat = read_stat
        self._read_meminfo = read_meminfo
        self._platform = platform
        self._last_times: tuple[int, ...] = ()  # baseline of the next utilisation
        self._snapshot: dict[str, float] = {}  # family -> value
        self._failed: set[str] = set()  # sources already logged as unreadable

    def start(self, *, poll: bool = True) -> bool:
        """Take the baseline reading; with ``poll``, keep reading every interval."""
        if not self._platform.startswith("linux"):
            log.info("CPU metrics off: they are read from /proc, which %s lacks", self._platform)
            return False
        try:
            times = parse_stat(self._read_stat())
            total, used = parse_meminfo(self._read_meminfo())
        except (OSError, ValueError) as exc:
            log.info("CPU metrics off: /proc cannot be read (%s)", exc)
            return False
        self._last_times = times
        self._snapshot = {_MEMORY_TOTAL: total, _MEMORY_USED: used}
        log.info("Collecting CPU metrics")
        if poll:
            self._start_polling()
        return True

    def stop(self) -> None:
        """Stop polling (waits briefly for the thread); nothing else to release."""
        self._stop_polling()

    def poll_once(self) -> None:
        """Read both files; a file that cannot be read leaves its families out this time."""
        if not self._last_times:
            return  # not started
        snapshot: dict[str, float] = {}
        try:
            times = parse_stat(self._read_stat())
        except (OSError, ValueError) as exc:
            self._unavailable("/proc/stat", exc)
        else:
            utilization = cpu_utilization(times, self._last_times)
            if utilization is not None:
                snapshot[_UTILIZATION] = utilization
                self._last_times = times
            elif _UTILIZATION in self._snapshot:
                # No jiffy elapsed (a very short interval): keep the last value and
                # baseline, so the next reading spans a longer window.
                snapshot[_UTILIZATION] = self._snapshot[_UTILIZATION]
        try:
            snapshot[_MEMORY_TOTAL], snapshot[_MEMORY_USED] = parse_meminfo(self._read_meminfo())
        except (OSError, ValueError) as exc:
            self._unavailable("/proc/meminfo", exc)
        self._snapshot = snapshot  # one reference swap: a scrape sees a whole snapshot

    def _unavailable(self, source: str, exc: Exception) -> None:
        if source not in self._failed:
            self._failed.add(source)
            log.info("CPU metrics: %s unavailable (%s)", source, exc)

    def render(self) -> str:
        snapshot = self._snapshot
        lines: list[str] = []
        for name, text in _FAMILIES:
            value = snapshot.get(name)
            if value is None:
                continue
            lines.append(f"# HELP {name} {text}")
            lines.append(f"# TYPE {name} gauge")
            lines.append(f"{name} {format_number(value)}")
        return "\n".join(lines) + "\n" if lines else ""
