"""What the engine's loop thread does per request: wake-ups, system calls, CPU.

cost-budget says how much CPU the engine's loop spends per request; this says how often
it wakes and what it asks the kernel for, which is what a structural cut changes. The
service runs with ``--frontends 2`` on cost-budget's repository; h2load drives one of its
workloads; after a warm-up, ``perf stat`` counts, for the engine's loop thread and the
model's instance thread separately, CPU time, context switches and the system calls of
the hand-offs (epoll_pwait: loop turns that polled; futex: queue and GIL hand-offs;
read and write: frames and the eventfd of call_soon_threadsafe), per request the model
counted. Needs perf with tracepoint access (root, or perf_event_paranoid <= -1).

    PYTHONPATH=.:protos:tests .venv/bin/python -m loadtest.engine_wakeups add_sub 5
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import tempfile
import time
from pathlib import Path

from server_process import ServerProcess

from loadtest.h2grpc import model_successes
from loadtest.processes import engine_pid
from loadtest.scenarios.cost_budget import WORKLOADS, write_repository

EVENTS = ["task-clock", "context-switches"] + [
    f"syscalls:sys_enter_{name}" for name in ("epoll_pwait", "futex", "read", "write")
]


def _threads(pid: int) -> dict[int, str]:
    return {
        int(tid): Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip()
        for tid in os.listdir(f"/proc/{pid}/task")
    }


def _stat(tid: int, seconds: float) -> subprocess.Popen[str]:
    command = ["perf", "stat", "-x", ",", "-e", ",".join(EVENTS), "-t", str(tid)]
    return subprocess.Popen(
        [*command, "--", "sleep", str(seconds)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def _per_request(out: str, requests: int) -> str:
    """perf's CSV lines as one line of figures per request."""
    cells = []
    for line in out.splitlines():
        fields = line.split(",")
        if len(fields) < 3 or not re.fullmatch(r"[\d.]+", fields[0]):
            continue
        name, value = fields[2].removeprefix("syscalls:sys_enter_"), float(fields[0])
        if name == "task-clock":  # milliseconds
            cells.append(f"cpu {value * 1e3 / requests:.1f} µs")
        else:
            cells.append(f"{name} {value / requests:.2f}")
    return "  ".join(cells)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workload", choices=[w.key for w in WORKLOADS if not w.rest])
    parser.add_argument("seconds", type=float, nargs="?", default=5.0)
    args = parser.parse_args()
    work = next(w for w in WORKLOADS if w.key == args.workload)
    tmp = Path(tempfile.mkdtemp(prefix="engine-wakeups-"))
    write_repository(tmp / "repo")
    body = tmp / "body"
    body.write_bytes(work.body())
    flags = ["--frontends", "2", "--allow-metrics=false"]
    server = ServerProcess([tmp / "repo"], extra_args=flags).start(timeout=120)
    try:
        engine = engine_pid(server)
        assert engine is not None, "no engine process in the server's log"
        streams = max(1, work.concurrency // work.connections)
        url = f"http://{server.url}/inference.GRPCInferenceService/ModelInfer"
        load = subprocess.Popen(
            [
                *("h2load", url, "-H", "content-type: application/grpc", "-H", "te: trailers"),
                *("-d", str(body), "-c", str(work.connections), "-m", str(streams)),
                *("-D", f"{round((args.seconds + 4) * 1000)}ms"),
            ],
            stdout=subprocess.DEVNULL,
        )
        time.sleep(2)  # warm-up
        # Instance threads carry "<model>_<group>_<index>", cut to 15 characters by Linux.
        name = re.compile(re.escape(work.model[:15]) + r"(_\d+)*_?")
        threads = _threads(engine)
        watched = {"loop": engine}
        watched.update({f"instance {n}": t for t, n in threads.items() if name.fullmatch(n)})
        before = model_successes(server.url, work.model)
        stats = {label: _stat(tid, args.seconds) for label, tid in watched.items()}
        time.sleep(args.seconds)
        requests = max(1, model_successes(server.url, work.model) - before)
        print(f"{work.key}: {requests} requests in {args.seconds:g} s")
        for label, proc in stats.items():
            _, err = proc.communicate(timeout=60)
            print(f"  {label} per request: {_per_request(err, requests)}")
        load.wait(timeout=60)
    finally:
        server.stop(timeout=60)


if __name__ == "__main__":
    main()
