"""CPU of a process, of its whole tree and of its threads, the machine's busy time, and the
resident memory of each process of a tree, all from /proc, so that a server's cost reads
the same whatever drives it; a split server spends most of its CPU in children, so the
tree is the figure that counts."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from proc_info import pid_alive, process_tree, stat_fields

_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def summarize_latencies(latencies_ms: Sequence[float]) -> dict[str, float]:
    """p50/p90/p99/mean/max in ms; NaN when nothing succeeded (tables show it plainly)."""
    if not latencies_ms:
        return dict.fromkeys(("p50", "p90", "p99", "mean", "max"), float("nan"))
    arr = np.asarray(latencies_ms, dtype=np.float64)
    p50, p90, p99 = np.percentile(arr, [50, 90, 99])
    return {"p50": p50, "p90": p90, "p99": p99, "mean": arr.mean(), "max": arr.max()}


def process_cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of one process (all its threads); None when it is gone."""
    fields = stat_fields(f"/proc/{pid}/stat")
    return None if fields is None else (int(fields[11]) + int(fields[12])) / _TICKS  # utime + stime


def tree_cpu_seconds(root_pid: int) -> float | None:
    """CPU seconds of ``root_pid`` and every live descendant; None when it is gone."""
    if not pid_alive(root_pid):
        return None
    return sum(process_cpu_seconds(pid) or 0.0 for pid in process_tree(root_pid))


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


def engine_cpu(pid: int | None) -> tuple[float, float]:
    """(whole process, first thread) CPU seconds of ``pid``, in our servers the engine and
    its event loop's thread; NaN for no process (one-process layout: no engine)."""
    if pid is None:
        return float("nan"), float("nan")
    return process_cpu_seconds(pid) or 0.0, sum(thread_cpu_seconds(pid).get("main", (0.0, 0.0)))
