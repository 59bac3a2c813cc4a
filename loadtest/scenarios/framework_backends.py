"""Issue 38's performance check: each framework backend served against its framework in-process.

For ONNX Runtime, PyTorch, TensorFlow SavedModel and OpenVINO, one MLP (the same
architecture and weights in each, ``loadtest/framework_mlp.py``; 3 x 2048 FP32 by default:
a few ms a batch) with dynamic batching, driven over gRPC at c=16 by h2load (one request of
batch 1 each), against the same file run in-process by its framework at the server's mean
executed batch size, with the same thread count (``--threads``, the instance's parameter
on both sides): served req/s / in-process samples/s, target >= 0.9. Beside it, a tiny model
of each backend (the same MLP at width 16, one layer, no batching) at c=8: the server's
own CPU per request, by process role (``loadtest/roles.py``), against ONNX Runtime's.

One server holds all eight models (``--frontends`` as serve.sh); each round takes, per
backend, the MLP served, the MLP in-process in a process of its own (the server idle
beside it), the tiny model served, and each side keeps its best round. Every served MLP
output is checked against the numpy reference first.

    .venv/bin/python -m loadtest framework-backends        # ~3 min; results/framework_backends.md
    .venv/bin/python -m loadtest framework-backends --quick --only pytorch
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import grpc
import numpy as np
from models import mlp_reference
from server_process import ServerProcess

from inference import grpc_service_pb2 as pb
from inference import grpc_service_pb2_grpc as pb_grpc
from loadtest import REPO_ROOT, RESULTS
from loadtest.framework_mlp import BACKENDS
from loadtest.h2grpc import INSTALL_HINT, answered, grpc_body, h2load, have_h2load
from loadtest.loadgen import infer_request
from loadtest.metrics import machine_busy_seconds
from loadtest.processes import engine_pid
from loadtest.report import command, fmt, loadavg, publish, short_commit, table, write_json
from loadtest.roles import classify, per_request, snapshot
from loadtest.scenario import Scenario, register, window_args

TARGET = 0.9
TINY_WIDTH = 16
LABELS = {
    "onnxruntime": "ONNX Runtime",
    "pytorch": "PyTorch (TorchScript)",
    "tensorflow": "TensorFlow SavedModel",
    "openvino": "OpenVINO IR",
}


@dataclass
class Served:
    """One measured window of one model."""

    model: str
    concurrency: int
    req_s: float
    mean_batch: float
    us_per_request: float  # server CPU (every process of its tree), user + system
    roles: dict[str, float]
    counted: int
    answered: int
    others_cores: float  # what the rest of the machine (client included) used meanwhile


def _stats(url: str, model: str) -> tuple[int, int]:
    """(inference_count, execution_count) of ``model``: successes and batches run."""
    with grpc.insecure_channel(url) as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        reply = stub.ModelStatistics(pb.ModelStatisticsRequest(name=model), timeout=10)
    return (
        sum(s.inference_count for s in reply.model_stats),
        sum(s.execution_count for s in reply.model_stats),
    )


def serve_window(
    server: ServerProcess, model: str, width: int, concurrency: int, seconds: float, warmup: float
) -> Served:
    """h2load on ``model`` (batch 1 a request) for a warm-up, then a measured window."""
    body = Path(tempfile.mkstemp(prefix=f"{model}-", suffix=".body")[1])
    x = np.random.default_rng(1).standard_normal((1, width)).astype(np.float32)
    body.write_bytes(grpc_body(infer_request(model, {"INPUT0": x}).SerializeToString()))
    connections = min(4, concurrency)
    streams = max(1, concurrency // connections)
    try:
        h2load(server.url, body, connections, streams, warmup)
        kinds = classify(server.pid, engine_pid(server))
        (done0, runs0), before = _stats(server.url, model), snapshot(kinds)
        busy0, start = machine_busy_seconds() or 0.0, time.perf_counter()
        out = h2load(server.url, body, connections, streams, seconds)
        elapsed = time.perf_counter() - start
        busy = (machine_busy_seconds() or 0.0) - busy0
        after, (done1, runs1) = snapshot(kinds), _stats(server.url, model)
    finally:
        body.unlink()
    counted = done1 - done0
    roles = per_request(before, after, kinds, counted)
    server_cores = sum(roles.values()) * counted / elapsed / 1e6
    return Served(
        model, concurrency, counted / elapsed, counted / max(1, runs1 - runs0),
        sum(roles.values()), roles, counted, answered(out), max(0.0, busy / elapsed - server_cores),
    )  # fmt: skip


def check_outputs(url: str, models: Sequence[str], width: int, layers: int) -> None:
    """One request per MLP against the numpy reference: wrong answers fast are not throughput.

    OpenVINO's CPU plugin runs an FP32 IR in bf16 where the CPU has it (its default
    INFERENCE_PRECISION_HINT, which Triton's backend leaves unless HINT_BF16 says): within
    3 % of the largest output there, 1e-3 elsewhere."""
    x = np.random.default_rng(0).standard_normal((1, width)).astype(np.float32)
    want = mlp_reference(x, width=width, layers=layers)
    with grpc.insecure_channel(url) as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        for model in models:
            reply = stub.ModelInfer(infer_request(model, {"INPUT0": x}), timeout=60)
            y = np.frombuffer(reply.raw_output_contents[0], "<f4").reshape(1, width)
            tolerance = 0.03 * float(np.abs(want).max()) if "openvino" in model else 1e-3
            if not np.allclose(y, want, rtol=1e-3, atol=tolerance):
                raise RuntimeError(f"{model}: served output differs from the numpy reference")


def _framework(argv: Sequence[str], timeout: float) -> str:
    """``python -m loadtest.framework_mlp ARGV`` in the server's Python; its stdout."""
    done = subprocess.run(
        [sys.executable, "-m", "loadtest.framework_mlp", *argv],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=timeout,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"framework_mlp {' '.join(argv)} failed:\n{done.stderr[-3000:]}")
    return done.stdout


def _in_process(args: argparse.Namespace, root: Path, backend: str, batch: int) -> dict[str, float]:
    """The MLP of ``backend`` run by its framework at ``batch``, in a process of its own."""
    bench = ["bench", backend, str(root / f"mlp_{backend}"), "--batch", str(batch)]
    bench += ["--threads", str(args.threads), "--seconds", str(args.duration)]
    bench += ["--width", str(args.width), "--layers", str(args.layers)]
    return {"batch": batch, **json.loads(_framework(bench, 600).strip().splitlines()[-1])}


def measure(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    """Write the models; then ``args.rounds`` rounds of, per backend: the MLP served, the
    same MLP in-process at the mean executed batch of that window (the server idle beside
    it), the tiny model served. Each side keeps its best round: on a shared machine a slow
    round measures the neighbours (as ``loadtest/ceiling.py``)."""
    shape = ["--width", str(args.width), "--layers", str(args.layers)]
    _framework(["write", str(root), "--batching", "--threads", str(args.threads), *shape], 600)
    tiny = ["--prefix", "tiny", "--width", str(TINY_WIDTH), "--layers", "1", "--threads", "1"]
    _framework(["write", str(root), *tiny], 600)
    backends = [b for b in BACKENDS if not args.only or b in args.only]
    flags = ["--frontends", str(args.frontends), "--allow-metrics=false"]
    server = ServerProcess([root], extra_args=flags).start(timeout=300)
    served: dict[str, Served] = {}
    in_process: dict[str, dict[str, float]] = {}
    try:
        check_outputs(server.url, [f"mlp_{b}" for b in backends], args.width, args.layers)
        for _ in range(args.rounds):
            for backend in backends:
                mlp = serve_window(
                    server,
                    f"mlp_{backend}",
                    args.width,
                    args.concurrency,
                    args.duration,
                    args.warmup,
                )
                alone = _in_process(args, root, backend, max(1, round(mlp.mean_batch)))
                small = serve_window(
                    server, f"tiny_{backend}", TINY_WIDTH, args.tiny_concurrency, args.duration,
                    args.warmup,
                )  # fmt: skip
                for window in (mlp, small):
                    if window.model not in served or window.req_s > served[window.model].req_s:
                        served[window.model] = window
                best = in_process.get(backend)
                if best is None or alone["samples_per_s"] > best["samples_per_s"]:
                    in_process[backend] = alone
                print(
                    f"{backend:>12}: MLP {mlp.req_s:6.0f} req/s (batch {mlp.mean_batch:5.2f}, "
                    f"{mlp.others_cores:4.2f} others' cores), in-process "
                    f"{alone['samples_per_s']:6.0f} samples/s; tiny {small.us_per_request:5.0f} "
                    "µs CPU/req",
                    file=sys.stderr,
                )
    finally:
        code = server.stop(timeout=60)
    if code != 0:
        raise RuntimeError(f"the server exited with {code}:\n{server.log[-2000:]}")
    return {"backends": backends, "served": served, "in_process": in_process}


def bound(cores: int, samples_per_s: float, tiny: Served) -> float:
    """The most served / in-process can be when serving costs what the tiny model's
    requests cost beside the model (its total less its instance threads) on ``cores``."""
    serving_s = (tiny.us_per_request - tiny.roles.get("engine instance threads", 0.0)) / 1e6
    return cores / (cores + samples_per_s * serving_s)


def report(args: argparse.Namespace, argv: Sequence[str], data: Mapping[str, Any]) -> str:
    backends: list[str] = data["backends"]
    served: dict[str, Served] = data["served"]
    in_process: dict[str, dict[str, float]] = data["in_process"]
    lines = [
        "# Framework backends: served against in-process, and the cost of a request",
        "",
        f"Command: `{command(argv)}`  ",
        f"Commit {short_commit()}; {os.cpu_count()} CPUs, **a shared 2-core machine** (other "
        f"agents' work runs beside it: figures move by 10-20 % between runs); load average "
        f"{loadavg()} at the end; the service with `--frontends {args.frontends}` as serve.sh "
        f"starts it; client: h2load over gRPC on loopback (it shares the 2 cores); "
        f"{args.warmup:g} s warm-up and {args.duration:g} s measured per point; "
        f"{args.rounds} round(s), the best of each side kept (a slow round measures the "
        "neighbours).",
        "",
        f"## MLP {args.layers} x {args.width} FP32, dynamic batching, c={args.concurrency}",
        "",
        "The same architecture and weights in each framework, one instance with "
        f"{args.threads} compute threads (the backend's thread parameter), batch 1 per request; "
        "in-process: back-to-back runs by the framework itself at the server's mean executed "
        f"batch size (rounded), same threads, {args.duration:g} s in 4 slices, the best slice "
        "kept (a ceiling), the server idle beside it. Every served output was "
        "checked against the numpy reference first. OpenVINO: Triton's backend fixes the batch "
        "to max_batch_size (16) and pads smaller ones (ENABLE_BATCH_PADDING), and its CPU plugin "
        "runs the FP32 IR in bf16 where the CPU has it (its default precision hint, left as "
        "Triton leaves it), in both columns.",
        "",
    ]
    head = [
        "backend", "served req/s", "mean exec batch", "in-process samples/s", "ms / run in-process",
        "served / in-process", f">= {TARGET}", "bound here", "server CPU µs/req",
        "others' cores",
    ]  # fmt: skip
    rows = []
    cores = os.cpu_count() or 1
    for backend in backends:
        s, p = served[f"mlp_{backend}"], in_process[backend]
        ratio = s.req_s / p["samples_per_s"]
        rows.append([
            LABELS[backend], fmt(s.req_s, 0), fmt(s.mean_batch, 2),
            f"{fmt(p['samples_per_s'], 0)} (batch {int(p['batch'])})", fmt(p["ms_per_run"], 2),
            fmt(ratio, 2), "yes" if ratio >= TARGET else "**no**",
            fmt(bound(cores, p["samples_per_s"], served[f"tiny_{backend}"]), 2),
            fmt(s.us_per_request, 0), fmt(s.others_cores, 2),
        ])  # fmt: skip
    lines += table(head, rows, "lrrrrrlrrr")
    above = [
        LABELS[b]
        for b in backends
        if served[f"mlp_{b}"].req_s / in_process[b]["samples_per_s"]
        > bound(cores, in_process[b]["samples_per_s"], served[f"tiny_{b}"])
    ]
    if above:
        lines += [
            "",
            f"Above its bound: {', '.join(above)}. Served and in-process ran in different "
            "seconds; a neighbour that took the cores during the in-process run makes the "
            "ratio look better than it is (the bound, from the same in-process figure, is then "
            "too low as well).",
        ]
    lines += [
        "",
        f"On {cores} cores the serving itself (gRPC in, batching, the frontends and the engine, "
        "the answer out) runs on the cores the model needs, and so does the client: with S the "
        "serving CPU per request (the tiny model's total less its instance threads, below), "
        f"served / in-process is at most {cores} / ({cores} + in-process samples/s x S), the "
        '"bound here" column, whatever the backend. Meeting 0.9 on this machine takes a model '
        "that needs about 9 x S / cores of CPU per sample or more, or more cores than the "
        "serving needs (results/mlp4096: ONNX at width 4096, c=64, 0.58 against the same bound).",
        "",
        "## The server's own cost per request: a tiny model, no batching, "
        f"c={args.tiny_concurrency}",
        "",
        f"The same MLP at width {TINY_WIDTH}, one layer (one MatMul + Add), one instance with one "
        "thread: µs of CPU (user + system) of the server's processes per request it counted, "
        "by role (`loadtest/roles.py`).",
        "",
    ]
    roles = sorted(
        {r for b in backends for r, v in served[f"tiny_{b}"].roles.items() if v >= 5.0},
        key=lambda r: -served[f"tiny_{backends[0]}"].roles.get(r, 0.0),
    )
    head = ["", *(LABELS[b] for b in backends)]
    tiny = [served[f"tiny_{b}"] for b in backends]
    rows = [[role, *(fmt(t.roles.get(role, 0.0), 0) for t in tiny)] for role in roles]
    rows.append(["**total µs/req**", *(fmt(t.us_per_request, 0) for t in tiny)])
    if "onnxruntime" in backends:
        base = served["tiny_onnxruntime"].us_per_request
        rows.append(["vs ONNX Runtime", *(fmt(t.us_per_request / base, 2) for t in tiny)])
    rows.append(["req/s", *(fmt(t.req_s, 0) for t in tiny)])
    lines += table(head, rows, "l" + "r" * len(backends))
    return "\n".join(lines) + "\n"


@register
class FrameworkBackends(Scenario):
    """Each framework backend served (dynamic batching) vs in-process; tiny-model cost."""

    name = "framework-backends"

    @staticmethod
    def add_cli_args(parser: argparse.ArgumentParser) -> None:
        quick = "2 s windows, prints only"
        window_args(
            parser, 4.0, 2.0, rounds=2, concurrency=16, quick=quick,
            quick_values={"duration": 2.0, "warmup": 1.0, "rounds": 1},
        )  # fmt: skip
        parser.add_argument("--tiny-concurrency", type=int, default=8)
        parser.add_argument("--width", type=int, default=2048)
        parser.add_argument("--layers", type=int, default=3)
        parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
        parser.add_argument("--frontends", type=int, default=os.cpu_count() or 1)
        parser.add_argument("--only", nargs="*", default=[], choices=BACKENDS)
        parser.add_argument("--out", type=Path, default=None)

    @staticmethod
    def run(args: argparse.Namespace) -> int:
        if not have_h2load():
            print(f"framework-backends: {INSTALL_HINT}", file=sys.stderr)
            return 2
        argv = sys.argv[1:]
        with tempfile.TemporaryDirectory(prefix="framework-backends-") as tmp:
            data = measure(args, Path(tmp))
        out = None if args.quick else (args.out or RESULTS / "framework_backends.md")
        publish(report(args, argv, data), out)
        if out is not None:
            raw = {
                "served": {k: asdict(v) for k, v in data["served"].items()},
                "in_process": data["in_process"],
            }
            write_json(raw, out.with_suffix(".json"))
        return 0
