"""Small measurement helpers shared by the load generator and the runner."""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np

__all__ = ["machine_busy_seconds", "process_cpu_seconds", "summarize_latencies"]

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


def process_cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of a process (all its threads), from /proc; None elsewhere.

    Comparing client and server CPU use tells whether a measurement is client-bound.
    """
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            stat = f.read()
    except OSError:
        return None
    # Field 2 (comm) may hold spaces; the fields after its closing ')' are positional.
    fields = stat[stat.rindex(")") + 2 :].split()
    utime, stime = int(fields[11]), int(fields[12])
    return (utime + stime) / _CLOCK_TICKS


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
