"""CPU of a process, of its whole tree and of its threads, the machine's busy time, and the
resident memory of each process of a tree, all from /proc, so that a server's cost reads
the same whatever drives it; a split server spends most of its CPU in children, so the
tree is the figure that counts."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def summarize_latencies(latencies_ms: Sequence[float]) -> dict[str, float]:
    """p50/p90/p99/mean/max in ms; NaN when nothing succeeded (tables show it plainly)."""
    if not latencies_ms:
        return dict.fromkeys(("p50", "p90", "p99", "mean", "max"), float("nan"))
    arr = np.asarray(latencies_ms, dtype=np.float64)
    p50, p90, p99 = np.percentile(arr, [50, 90, 99])
    return {"p50": p50, "p90": p90, "p99": p99, "mean": arr.mean(), "max": arr.max()}


def stat_fields(path: str) -> list[str] | None:
    """The fields of a /proc ``stat`` file after the command name; None when unreadable."""
    try:
        with open(path, encoding="ascii") as f:
            stat = f.read()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2 :].split()  # comm may hold spaces: skip past it


def _seconds(fields: list[str]) -> float:
    return (int(fields[11]) + int(fields[12])) / _TICKS  # utime + stime


def process_cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of one process (all its threads); None when it is gone."""
    fields = stat_fields(f"/proc/{pid}/stat")
    return None if fields is None else _seconds(fields)


def tree_cpu_seconds(root_pid: int) -> float | None:
    """CPU seconds of ``root_pid`` and every live descendant; None when it is gone."""
    parents: dict[int, int] = {}
    times: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (fields := stat_fields(f"/proc/{entry}/stat")) is not None:
            parents[int(entry)], times[int(entry)] = int(fields[1]), _seconds(fields)
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
    """CPU seconds all cores spent busy since boot (/proc/stat): minus the client's and the
    server's share, what other processes took (the noise of a shared machine)."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            fields = f.readline().split()
    except OSError:
        return None
    ticks = [int(v) for v in fields[1:9]]  # user nice system idle iowait irq softirq steal
    return (sum(ticks) - ticks[3] - ticks[4]) / _TICKS


def thread_cpu_seconds(pid: int) -> dict[str, tuple[float, float]]:
    """(user, system) CPU seconds of the threads of ``pid`` by name, summed over threads of
    one name; the process's first thread (the event loop's) is ``main``."""
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
            out[name] = (user + int(fields[11]) / _TICKS, system + int(fields[12]) / _TICKS)
    return out


def loop_thread_seconds(pid: int) -> float:
    """CPU seconds of the first thread of ``pid``: in our servers, the event loop's."""
    return sum(thread_cpu_seconds(pid).get("main", (0.0, 0.0)))


def rss_mb(pid: int) -> float | None:
    """Resident memory of one process (VmRSS) in MB; None when it is gone."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def process_tree(root_pid: int) -> dict[int, int]:
    """``root_pid`` and its live descendants, each with its parent's pid."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (fields := stat_fields(f"/proc/{entry}/stat")) is not None:
            parents[int(entry)] = int(fields[1])
    tree = {root_pid: parents.get(root_pid, 0)}
    frontier = [root_pid]
    while frontier:
        parent = frontier.pop()
        for pid, ppid in parents.items():
            if ppid == parent and pid not in tree:
                tree[pid] = ppid
                frontier.append(pid)
    return tree
