"""What /proc says about a process and its descendants (Linux): whether it is alive, its
process tree, its resident memory.

Standard library only, like server_process.py, so both test environments and the load
tests (``loadtest/metrics.py``) use the one reading: a server in the split layout is a
tree of processes (supervisor, engine, frontends, model workers), and what it costs or
holds is counted over all of them.
"""

from __future__ import annotations

import os

__all__ = ["cmdline", "pid_alive", "process_tree", "rss_mb", "stat_fields"]


def stat_fields(path: str) -> list[str] | None:
    """The fields of a /proc ``stat`` file after the command name; None when unreadable."""
    try:
        with open(path, encoding="ascii") as f:
            stat = f.read()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2 :].split()  # comm may hold spaces: skip past it


def cmdline(pid: int) -> str:
    """The command line of ``pid``, its arguments joined by spaces (raises when it is gone)."""
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return f.read().replace(b"\0", b" ").decode()


def pid_alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    fields = stat_fields(f"/proc/{pid}/stat")
    return fields is not None and fields[0] != "Z"


def process_tree(root_pid: int) -> dict[int, int]:
    """``root_pid`` and its live descendants, each with its parent's pid."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        fields = stat_fields(f"/proc/{entry}/stat") if entry.isdigit() else None
        if fields is not None and fields[0] != "Z":
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


def rss_mb(pid: int) -> float | None:
    """Resident memory of ``pid`` in MB (VmRSS); None when it is gone."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None
