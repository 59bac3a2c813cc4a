"""Which process role spends the CPU of a served request.

The server of the default layout is a tree: a supervisor, one engine (its event loop,
its instance threads, ONNX Runtime's pools), a frontend per core (grpc.aio's loop and
grpc's own threads), Python model workers under the engine, and the REST gateway beside
it. A total per request says how much; only the split says where to cut. Each thread of
each process is put in one role by what its process is and by its name in /proc (the
instance threads carry their instance's name, grpc's threads theirs); the figures are
per request the server counted, so a role's share is comparable across workloads.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from proc_info import cmdline, process_tree

from loadtest.metrics import thread_cpu_seconds

__all__ = ["ROLE_ORDER", "Snapshot", "classify", "per_request", "snapshot"]

#: Threads grpc's C core starts (their /proc names, truncated to 15 characters by Linux).
GRPC_THREADS = frozenset(
    {"event_engine", "grpc_global_tim", "lifeguard", "default-executo", "resolver-execut"}
)
#: Every role a report may show, in the order of the request's path.
ROLE_ORDER = (
    "gateway main thread",
    "gateway serving threads",
    "frontend loop (grpc.aio + ours)",
    "frontend grpc threads",
    "frontend other threads",
    "engine loop",
    "engine instance threads",
    "engine other threads (ORT pools, unnamed)",
    "engine grpc threads",
    "Python model workers",
    "instance worker processes",
    "supervisor",
    "other processes",
)


@dataclass(frozen=True)
class ProcessKind:
    """What one process of the tree is."""

    pid: int
    kind: str  # gateway, frontend, engine, python_worker, instance_worker, supervisor, other


def _kind_of(pid: int, root: int, engine: int | None, gateway: int | None) -> str:
    """The kind of ``pid`` from the layout's known pids and its command line."""
    if pid == gateway:
        return "gateway"
    if pid == engine or (engine is None and pid == root):
        return "engine"  # one process (--frontends 0): the engine and its frontend in one
    if pid == root:
        return "supervisor"
    try:
        line = cmdline(pid)
    except OSError:
        return "other"
    if "service.backends.python.stub" in line:
        return "python_worker"
    if "resource_tracker" in line:
        return "other"
    if "spawn_main" in line:  # the supervisor's spawned children: the engine or frontends
        return "frontend" if engine is not None else "other"
    return "instance_worker" if "service.backends" in line else "other"


def classify(root: int, engine: int | None, gateway: int | None = None) -> dict[int, ProcessKind]:
    """Every live process of the server's tree (and the gateway's) by kind.

    ``engine`` is the engine's pid in the split layout (None: one process, whose threads
    are then both engine and frontend roles by name)."""
    pids = dict(process_tree(root))
    if gateway is not None:
        pids.update(process_tree(gateway))
    kinds: dict[int, ProcessKind] = {}
    for pid in pids:
        kind = _kind_of(pid, root, engine, gateway)
        if (
            kind == "other"
            and gateway is not None
            and pid != gateway
            and _under(pid, pids, gateway)
        ):
            kind = "gateway"  # a gateway worker (--workers N)
        if kind == "other" and engine is not None and _under(pid, pids, engine):
            kind = "instance_worker"
        kinds[pid] = ProcessKind(pid, kind)
    return kinds


def _under(pid: int, parents: Mapping[int, int], ancestor: int) -> bool:
    seen = set()
    while pid in parents and pid not in seen:
        seen.add(pid)
        pid = parents[pid]
        if pid == ancestor:
            return True
    return False


def role_of(kind: str, thread: str, one_process: bool) -> str:
    """The role of one thread (``main``: the process's first, its event loop's)."""
    if kind == "gateway":
        return "gateway main thread" if thread == "main" else "gateway serving threads"
    if kind == "engine":
        if thread == "main":
            return "frontend loop (grpc.aio + ours)" if one_process else "engine loop"
        if thread in GRPC_THREADS:
            return "frontend grpc threads" if one_process else "engine grpc threads"
        if thread == "python":  # unnamed: ORT's pools, grpc.aio's poller, executors
            return "engine other threads (ORT pools, unnamed)"
        return "engine instance threads"
    if kind == "frontend":
        if thread == "main":
            return "frontend loop (grpc.aio + ours)"
        return "frontend grpc threads" if thread in GRPC_THREADS else "frontend other threads"
    return {
        "python_worker": "Python model workers",
        "instance_worker": "instance worker processes",
        "supervisor": "supervisor",
    }.get(kind, "other processes")


#: pid -> thread name -> (user, system) CPU seconds
Snapshot = dict[int, dict[str, tuple[float, float]]]


def snapshot(pids: Iterable[int]) -> Snapshot:
    """Thread CPU of each process that is still alive."""
    out: Snapshot = {}
    for pid in pids:
        try:
            out[pid] = thread_cpu_seconds(pid)
        except OSError:  # ended between the listing and the reading
            continue
    return out


def per_request(
    before: Snapshot, after: Snapshot, kinds: Mapping[int, ProcessKind], requests: int
) -> dict[str, float]:
    """µs of CPU per request by role between two snapshots (user + system)."""
    one_process = not any(k.kind == "frontend" for k in kinds.values())
    roles: dict[str, float] = {}
    for pid, threads in after.items():
        kind = kinds[pid].kind if pid in kinds else "other"
        for name, (user, system) in threads.items():
            user0, system0 = before.get(pid, {}).get(name, (0.0, 0.0))
            spent = (user - user0) + (system - system0)
            role = role_of(kind, name, one_process)
            roles[role] = roles.get(role, 0.0) + spent
    return {role: 1e6 * seconds / max(requests, 1) for role, seconds in roles.items()}
