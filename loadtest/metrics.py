"""What the benchmarks measure on this machine: CPU of a process, of its whole tree and of
its threads, the machine's busy time, resident memory, and latency percentiles.

All from /proc, so that a server's cost is read the same way whatever drives it (h2load,
the Python load generator, a real client); a split server spends most of its CPU in
children, so the tree is the figure that counts.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

__all__ = [
    "loop_thread_seconds",
    "machine_busy_seconds",
    "process_cpu_seconds",
    "rss_mb",
    "stat_fields",
    "summarize_latencies",
    "thread_cpu_seconds",
    "tree_cpu_seconds",
]

_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def summarize_latencies(latencies_ms: Sequence[float]) -> dict[str, float]:
    """p50/p90/p99/mean/max in ms; NaN when nothing succeeded (so tables show it plainly)."""
    if not latencies_ms:
        return {k: float("nan") for k in ("p50", "p90", "p99", "mean", "max")}
    arr = np.asarray(latencies_ms, dtype=np.float64)
    p50, p90, p99 = np.percentile(arr, [50, 90, 99])
    return {
        "p50": float(p50),
        "p90": float(p90),
        "p99": float(p99),
        "mean": float(arr.mean()),
        "max": float(arr.max()),
    }


def stat_fields(path: str) -> list[str] | None:
    """The fields of a /proc ``stat`` file after the command name; None when unreadable."""
    try:
        with open(path, encoding="ascii") as f:
            stat = f.read()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2 :].split()  # comm may hold spaces: skip past it


def process_cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of a process (all its threads), from /proc; None elsewhere.

    Comparing client and server CPU use tells whether a measurement is client-bound.
    """
    fields = stat_fields(f"/proc/{pid}/stat")
    return None if fields is None else _cpu_seconds(fields)


def _cpu_seconds(fields: list[str]) -> float:
    """utime + stime of a /proc stat line's ``fields`` (``stat_fields``), in seconds."""
    return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS


def tree_cpu_seconds(root_pid: int) -> float | None:
    """CPU seconds of ``root_pid`` and every live descendant; None when it is gone.

    A server split into frontend and engine processes spends most of its CPU in children,
    so its own process's figure alone would read near zero.
    """
    parents: dict[int, int] = {}
    times: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (fields := stat_fields(f"/proc/{entry}/stat")) is not None:
            parents[int(entry)] = int(fields[1])
            times[int(entry)] = _cpu_seconds(fields)
    if root_pid not in times:
        return None
    tree, frontier = {root_pid}, [root_pid]
    while frontier:
        parent = frontier.pop()
        children = [pid for pid, ppid in parents.items() if ppid == parent]
        tree.update(children)
        frontier.extend(children)
    return sum(times[pid] for pid in tree)


def machine_busy_seconds() -> float | None:
    """CPU seconds all cores spent busy since boot (/proc/stat), None elsewhere.

    Busy minus the client's and the server's share is what other processes took during a
    measurement: on a shared machine that is the noise in the numbers.
    """
    try:
        with open("/proc/stat", encoding="ascii") as f:
            fields = f.readline().split()
    except OSError:
        return None
    # user nice system idle iowait irq softirq steal (guest time is already in user/nice)
    ticks = [int(v) for v in fields[1:9]]
    return (sum(ticks) - ticks[3] - ticks[4]) / _CLOCK_TICKS


def thread_cpu_seconds(pid: int) -> dict[str, tuple[float, float]]:
    """(user, system) CPU seconds of the threads of ``pid`` by thread name, summed over
    threads of one name; the process's first thread (the event loop's) is ``main``."""
    out: dict[str, tuple[float, float]] = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        fields = stat_fields(f"/proc/{pid}/task/{tid}/stat")
        try:
            name = Path(f"/proc/{pid}/task/{tid}/comm").read_text(encoding="utf-8").strip()
        except OSError:
            continue
        if fields is not None:
            name = "main" if tid == str(pid) else name
            user, system = out.get(name, (0.0, 0.0))
            out[name] = (
                user + int(fields[11]) / _CLOCK_TICKS,
                system + int(fields[12]) / _CLOCK_TICKS,
            )
    return out


def loop_thread_seconds(pid: int) -> float:
    """CPU seconds of the first thread of ``pid``: in our servers, the event loop's."""
    return sum(thread_cpu_seconds(pid).get("main", (0.0, 0.0)))


def rss_mb(pid: int) -> float:
    """Resident memory of ``pid`` in MiB (VmRSS), 0 when unreadable."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0
