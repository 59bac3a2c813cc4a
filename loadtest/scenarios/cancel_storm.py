"""Memory under a storm of expired and cancelled requests, round after round (issue 26).

Starts the service in the default layout (a supervisor, the engine, 2 frontends, the
Python models' workers) on the default repository plus two slow identity models (3 ms an
execution; one behind a dynamic batcher with a 3 ms queue delay, one on the default
scheduler). Each round sends ``--expired`` ModelInfer requests with a 1 ms deadline and
``--cancelled`` ones cancelled 0-6 ms after they are sent, on one connection, and
``--normal`` requests without a deadline on another, ``--concurrency`` at a time, to
all four models (a third of them with 64 KiB inputs, which take slab blocks); then waits
``--settle`` seconds and reads the resident memory of every process of the server. At
the end the server stops and the engine's log names the requests each frontend left in
its table (none, unless a request never got its terminal message). Memory that settles
levels off within the first rounds; a leak grows with every round.

    .venv/bin/python -m loadtest cancel-storm --rounds 12
"""

from __future__ import annotations

import argparse
import asyncio
import random
import re
import tempfile
import time
from pathlib import Path

import numpy as np
from cancel_storm import storm_round
from proc_info import process_tree, rss_mb
from server_process import DEFAULT_REPOSITORY

from inference import grpc_service_pb2 as pb
from inference import grpc_service_pb2_grpc as pb_grpc
from loadtest.loadgen import infer_request
from loadtest.processes import engine_pid, service
from loadtest.report import publish, table
from loadtest.repository import batching, identity_backend, parameters
from loadtest.scenario import Scenario, register

WIDE = 16 * 1024  # FP32 elements: 64 KiB, more than a frame carries inline
_LEFT = re.compile(r"frontend (\d+) \(pid \d+\) disconnected, (\d+) requests in flight")


def _requests() -> list[pb.ModelInferRequest]:
    made = []
    for width in (4, 4, WIDE):
        made.append(infer_request("slow_batched", {"INPUT0": np.ones((1, width), np.float32)}))
        made.append(infer_request("slow_plain", {"INPUT0": np.ones(width, np.float32)}))
        pair = {f"INPUT{i}": np.ones((1, width), np.float32) for i in (0, 1)}
        made.append(infer_request("add_sub", pair))
    made.append(infer_request("iris_pipeline", {"MEASUREMENTS_MM": np.ones((1, 4), np.float32)}))
    return made


def _memory(supervisor: int, engine: int | None) -> dict[str, float]:
    """RSS (MB) by role: supervisor, engine, each frontend, the engine's workers summed,
    and multiprocessing's resource tracker (a child of the supervisor too)."""
    tree = process_tree(supervisor)
    roles = {"supervisor": rss_mb(supervisor) or 0.0, "engine": rss_mb(engine or 0) or 0.0}
    frontends = 0
    for pid in sorted(p for p, parent in tree.items() if parent == supervisor and p != engine):
        try:
            tracker = b"resource_tracker" in Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if not tracker:
            frontends += 1
        roles["tracker" if tracker else f"frontend {frontends}"] = rss_mb(pid) or 0.0
    workers = [pid for pid, parent in tree.items() if parent == engine]
    roles["workers"] = sum(rss_mb(pid) or 0.0 for pid in workers)
    return roles


@register
class CancelStorm(Scenario):
    """RSS of every server process per round of expired and cancelled requests."""

    name = "cancel-storm"

    @staticmethod
    def add_cli_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("--rounds", type=int, default=12)
        p.add_argument("--expired", type=int, default=1600, help="per round, 1 ms deadline")
        p.add_argument("--cancelled", type=int, default=400, help="per round")
        p.add_argument("--normal", type=int, default=300, help="per round, no deadline")
        p.add_argument("--concurrency", type=int, default=128)
        p.add_argument("--settle", type=float, default=2.0, help="seconds after each round")
        p.add_argument("--out", type=Path, help="also write the report here")

    @staticmethod
    def run(args: argparse.Namespace) -> int:
        storm = {"expired": args.expired, "cancelled": args.cancelled, "normal": args.normal}
        rows: list[list[str]] = []
        failed = 0
        with tempfile.TemporaryDirectory(prefix="cancel-storm-") as tmp:
            repo = Path(tmp) / "repo"
            slow = parameters({"execute_delay_ms": "3"})
            identity_backend(repo, "slow_batched", max_batch_size=8, extra=slow + batching(3000))
            identity_backend(repo, "slow_plain", extra=slow)
            proc = service(
                DEFAULT_REPOSITORY,
                *("--model-repository", str(repo), "--frontends", "2", "--log-verbose", "1"),
                *("--metrics-address", "127.0.0.1", "--metrics-port", "0"),
            ).start()
            try:
                engine, rng = engine_pid(proc), random.Random(26)
                rounds = [("warm-up", {"normal": args.normal})]
                rounds += [(str(i), storm) for i in range(1, args.rounds + 1)]
                stub = pb_grpc.GRPCInferenceServiceStub
                for label, counts in rounds:
                    start = time.monotonic()
                    outcomes = asyncio.run(
                        storm_round(proc.url, stub, _requests(), counts, args.concurrency, rng)
                    )
                    seconds = time.monotonic() - start
                    failed += counts["normal"] - outcomes["normal OK"]
                    time.sleep(args.settle)
                    memory = _memory(proc.pid, engine)
                    shown = ", ".join(f"{k} {v}" for k, v in sorted(outcomes.items()))
                    cells = [f"{mb:.1f}" for mb in (sum(memory.values()), *memory.values())]
                    rows.append([label, f"{seconds:.1f}", *cells, shown])
            finally:
                code = proc.stop()
            left = {f"frontend {i}": int(n) for i, n in sorted(_LEFT.findall(proc.log))}
        head = ["round", "s", "total MB", *(f"{role} MB" for role in memory), "outcomes"]
        lines = [f"`{args.command}`", "", *table(head, rows, "rrr" + "r" * len(memory))]
        lines += ["", f"Left in the engine's tables at the stop: {left} (exit code {code})."]
        publish("\n".join(lines) + "\n", args.out)
        return 1 if failed or code or len(left) != 2 or any(left.values()) else 0
