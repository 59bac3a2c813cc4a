"""``--frontends 0 / 1 / 2`` side by side: throughput, server CPU per request, latency.

h2load sends unary ModelInfer for add_sub ([1, 16] FP32, no batching and with dynamic
batching) and 1 MiB identity over several connections, which the kernel spreads over the
frontend processes. Server CPU is the whole process tree's divided by the successes the
server counted (ModelStatistics); the engine's cores and its loop thread's are shown
beside; p50 at concurrency 1 comes from the Python load generator. Modes alternate round
by round, so slow drift of a shared machine hits all of them.

    .venv/bin/python -m loadtest scaling-bench [--rounds 2] [--duration 8] [--out FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from pathlib import Path

import grpc
import numpy as np

from inference import grpc_service_pb2 as pb
from inference import grpc_service_pb2_grpc as pb_grpc
from loadtest.h2grpc import grpc_body, h2load, h2load_rate, model_successes
from loadtest.loadgen import drive, infer_request
from loadtest.metrics import engine_cpu, machine_busy_seconds, summarize_latencies, tree_cpu_seconds
from loadtest.processes import engine_pid, service
from loadtest.report import fmt, median, publish, table
from loadtest.repository import add_sub, batching, identity_backend
from loadtest.scenario import Scenario, register, window_args

#: (label, model, concurrency, tensor elements)
SCENARIOS = [
    ("add_sub c=64", "add_sub", 64, 16),
    ("add_sub c=8", "add_sub", 8, 16),
    ("add_sub batching c=32", "add_sub_batch", 32, 16),
    ("identity 1 MiB c=8", "identity", 8, 1 << 18),
]
Rows = dict[tuple[int, str], list[dict[str, float]]]
CORES = ("server_cores", "engine_cores", "engine_loop_cores", "others_cores")  # per row


def request(model: str, width: int = 16) -> pb.ModelInferRequest:
    if model == "identity":
        return infer_request(model, {"INPUT0": np.ones(width, np.float32)})
    return infer_request(model, {f"INPUT{i}": np.ones((1, width), np.float32) for i in (0, 1)})


def load_row(
    url: str, pids: tuple[int, int | None], model: str, body: Path, shape: tuple[int, int, int],
    seconds: float,
) -> dict[str, float]:  # fmt: skip
    """One h2load window (``shape``: connections, streams each, client threads). CPU and
    successes both span warm-up and window: their ratio is the cost of one request."""
    pid, engine = pids
    before_ok, busy0 = model_successes(url, model), machine_busy_seconds() or 0.0
    cpu0, engine0 = tree_cpu_seconds(pid) or 0.0, engine_cpu(engine)
    start = time.monotonic()
    out = h2load(url, body, shape[0], shape[1], seconds, shape[2], warmup=1.0)
    elapsed = time.monotonic() - start
    cpu = (tree_cpu_seconds(pid) or 0.0) - cpu0
    engine1 = engine_cpu(engine)
    busy = (machine_busy_seconds() or 0.0) - busy0
    ok = model_successes(url, model) - before_ok
    return {
        "rps": h2load_rate(out),
        "cpu_ms_per_req": 1000 * cpu / max(ok, 1),
        "server_cores": cpu / elapsed,
        "engine_cores": (engine1[0] - engine0[0]) / elapsed,
        "engine_loop_cores": (engine1[1] - engine0[1]) / elapsed,
        "others_cores": (busy - cpu) / elapsed,
    }


async def p50_c1(url: str, count: int) -> float:
    """p50 of ``count`` requests at concurrency 1, after a short warm-up."""
    message = request("add_sub")
    async with grpc.aio.insecure_channel(url) as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        await drive([lambda: stub.ModelInfer(message)], 0.0, 0.3)
        window = await drive([lambda: stub.ModelInfer(message)], 0.0, 60.0, cap=count)
    return summarize_latencies(window.report.latencies_ms)["p50"]


def scaling_lines(rows: Rows, modes: list[int]) -> list[str]:
    """Throughput of each mode over the first mode's, per scenario (the issue's 8 vs 1 ratio)."""
    if len(modes) < 2:
        return []

    def rps(mode: int, label: str) -> float:
        return median(r["rps"] for r in rows.get((mode, label), []))

    cells = [
        [label, *(f"{rps(m, label) / rps(modes[0], label):.2f} x" for m in modes[1:])]
        for label, *_ in SCENARIOS
        if (modes[0], label) in rows
    ]
    head = ["scenario", *(f"--frontends {m}" for m in modes[1:])]
    title = f"Throughput over `--frontends {modes[0]}`, same run:"
    return ["", title, "", *table(head, cells, "l" + "r" * len(modes))]


def measure(args: argparse.Namespace, tmp: Path) -> Rows:
    rows: Rows = {}
    add_sub(tmp / "repo", max_batch_size=64)
    add_sub(tmp / "repo", "add_sub_batch", max_batch_size=64, extra=batching(500))
    identity_backend(tmp / "repo", "identity")
    bodies: dict[str, Path] = {}
    for label, model, _, width in SCENARIOS:
        bodies[label] = tmp / f"{len(bodies)}.bin"
        bodies[label].write_bytes(grpc_body(request(model, width).SerializeToString()))
    for round_index in range(args.rounds):
        for mode in args.modes if round_index % 2 == 0 else reversed(args.modes):
            server = service(tmp / "repo", "--allow-metrics=false", "--frontends", str(mode))
            server.start(timeout=90)
            pids = (server.pid, engine_pid(server))
            try:
                for label, model, conc, _ in SCENARIOS:
                    streams = max(1, conc // args.connections)
                    shape = (min(conc, args.connections), streams, args.client_threads)
                    row = load_row(server.url, pids, model, bodies[label], shape, args.duration)
                    rows.setdefault((mode, label), []).append(row)
                p50 = asyncio.run(p50_c1(server.url, args.latency_requests))
                rows.setdefault((mode, "add_sub c=1"), []).append({"p50_ms": p50})
            finally:
                code = server.stop(timeout=60)
                assert code == 0, f"server --frontends {mode} exited with {code}"
    return rows


@register
class ScalingBench(Scenario):
    """--frontends 0/1/2 (or --modes) under h2load: req/s, CPU per request, p50."""

    name = "scaling-bench"

    @staticmethod
    def add_cli_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("--modes", type=int, nargs="+", default=[0, 1, 2])
        window_args(p, 8.0, rounds=2)
        # One h2load thread saturates near the 2-core box's server; on many cores the client
        # needs threads of its own, and more connections than frontends so that
        # SO_REUSEPORT's hash reaches every frontend.
        p.add_argument("--connections", type=int, default=8)
        p.add_argument("--client-threads", type=int, default=1)
        p.add_argument("--latency-requests", type=int, default=2000)
        p.add_argument("--out", type=Path)

    @staticmethod
    def run(args: argparse.Namespace) -> int:
        with tempfile.TemporaryDirectory() as tmp:
            rows = measure(args, Path(tmp))

        cells = []
        for (mode, label), items in sorted(rows.items()):
            med = {k: median(r[k] for r in items) for k in items[0]}
            if "p50_ms" in med:
                cells.append([mode, label, *[""] * 6, f"{med['p50_ms']:.3f}"])
            else:
                cores = [fmt(med[key]) for key in CORES]
                cells.append(
                    [mode, label, f"{med['rps']:,.0f}", fmt(med["cpu_ms_per_req"], 3), *cores, ""]
                )
        head = ["--frontends", "scenario", "req/s", "server CPU ms/req", "server cores"]
        head += ["engine cores", "engine loop thread cores", "others' cores", "p50 c=1 ms"]
        lines = [
            f"Command: `{args.command}`",
            "",
            f"scaling-bench: {os.cpu_count()} cores, h2load {args.connections} connections "
            f"on {args.client_threads} thread(s), {args.duration:.0f} s windows, "
            f"{args.rounds} rounds (median of rounds)",
            "",
            *table(head, cells, "rlrrrrrrr"),
            *scaling_lines(rows, args.modes),
        ]
        publish("\n".join(lines) + "\n", args.out)
        return 0
