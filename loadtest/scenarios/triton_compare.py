"""Ours against the real Triton 2.51 on this machine: same clients, one run (issue 25).

Triton (``start_triton.sh`` of ``../shared/triton-qa/reference``: python backend only,
metrics off) serves cpu-bench's workloads and Triton's ``simple`` example (INT32 [16] x 2,
max_batch_size 8) as Python models (add_sub and simple: the tests' add_sub model.py); ours
the same configs as ONNX models and identity by its built-in backend, in the default layout
(one frontend per core), metrics off as Triton's; one instance each. Both stay up; a round
loads one at a time, the order alternating between rounds: h2load windows (req/s: the
successes each server's ModelStatistics counted; CPU: its whole process tree per success),
then perf_analyzer's p50 at concurrency 1 on ``simple`` over gRPC. Medians over rounds.

Exit code 2, nothing run, when Triton or perf_analyzer is missing.

    .venv/bin/python -m loadtest triton-compare --rounds 3   # results/triton_compare.md
    .venv/bin/python -m loadtest triton-compare --quick      # smoke run, prints only
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import subprocess
import sys
import tempfile
from functools import partial
from pathlib import Path

from models import add_sub_model
from server_process import LoggedProcess

from loadtest import REPO_ROOT, RESULTS
from loadtest.h2grpc import have_h2load
from loadtest.processes import service
from loadtest.report import loadavg, median, publish, short_commit, table
from loadtest.repository import add_sub, batching, identity_backend, onnx_model
from loadtest.scenario import Scenario, register, window_args
from loadtest.scenarios.cpu_bench import WORKLOADS, Server, alternate, h2load_bodies

REFERENCE = REPO_ROOT.parent / "shared" / "triton-qa" / "reference" / "start_triton.sh"
PERF_ANALYZER = Path.home() / "perf-analyzer" / "bin" / "perf_analyzer"
PY_ADD_SUB = REPO_ROOT / "tests" / "python_models" / "add_sub" / "1" / "model.py"
PY_IDENTITY = """import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        inputs = [pb_utils.get_input_tensor_by_name(r, "INPUT0") for r in requests]
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", t.as_numpy())])
                for t in inputs]
"""
PYTHON = 'backend: "python"\n'
ALLOW_METRICS = "--allow-metrics=false"  # as start_triton.sh
TARGETS = {"add_sub": ("≥", 0.85), "latency": ("≤", 1.5)}  # ours / Triton


def repositories(root: Path) -> tuple[Path, Path]:
    """Ours (ONNX, identity backend) and Triton's: the same configs, ``backend: "python"``."""
    ours, theirs = root / "ours", root / "triton"
    add_sub(ours)
    add_sub(ours, "add_sub_batch", extra=batching(None))
    io = [[(f"{kind}{i}", "INT32", [16]) for i in (0, 1)] for kind in ("INPUT", "OUTPUT")]
    onnx_model(ours, "simple", add_sub_model("INT32", ("batch", 16)), *io, max_batch_size=8)
    one = "instance_group [ { count: 1 kind: KIND_CPU } ]\n"
    identity_backend(ours, "identity_1m", "262144", extra=one)  # 1 MiB of FP32
    for model in ours.iterdir():
        config = (model / "config.pbtxt").read_text(encoding="utf-8")
        config = re.sub(r'platform: "onnxruntime_onnx"|backend: "identity"', "", config)
        (theirs / model.name / "1").mkdir(parents=True)
        (theirs / model.name / "config.pbtxt").write_text(PYTHON + config, encoding="utf-8")
        code = PY_IDENTITY if model.name == "identity_1m" else PY_ADD_SUB.read_text()
        (theirs / model.name / "1" / "model.py").write_text(code, encoding="utf-8")
    return ours, theirs


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def perf_p50(exe: Path, server: Server, seconds: float) -> float:
    """perf_analyzer's p50 (ms) on ``simple`` at c=1 over gRPC; it loads libcudart from
    its own environment. ``-s 1000``: a shared machine is never "stable" by its 10 %."""
    libs = [str(p) for p in exe.parent.parent.glob("lib/python*/site-packages/nvidia/*/lib")]
    env = {**os.environ, "LD_LIBRARY_PATH": os.pathsep.join(libs)}
    command = [
        *(str(exe), "-m", "simple", "-i", "grpc", "-u", server.process.url, "-s", "1000"),
        *("--concurrency-range", "1", "--percentile=50", "-r", "3"),
        *("--measurement-interval", str(round(seconds * 1e3))),
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
    found = re.search(r"Concurrency: 1, .* latency (\d+) usec", done.stdout)
    if found is None:
        raise RuntimeError(f"perf_analyzer failed ({done.returncode}): {done.stdout}{done.stderr}")
    return int(found.group(1)) / 1e3


def render(servers: list[Server], args: argparse.Namespace, client: str, load0: str) -> str:
    rows = []
    for key, title in [(w.key, f"{w.title}, c={w.concurrency}") for w in WORKLOADS] + [
        ("latency", "simple p50 ms at c=1 (perf_analyzer, gRPC)")
    ]:
        if key == "latency" and servers[0].p50_ms:
            triton, ours = (median(x.p50_ms) for x in servers)
            cells, cpu = [f"{triton:.3f}", f"{ours:.3f}"], ["", ""]
        elif key in servers[0].samples:
            triton, ours = (median(s.req_s for s in x.samples[key]) for x in servers)
            cells = [f"{triton:,.0f}", f"{ours:,.0f}"]
            cpu = [f"{median(s.cpu_us for s in x.samples[key]):.0f}" for x in servers]
        else:
            continue
        sign, bound = TARGETS.get(key, ("", 0.0))
        met = (ours / triton >= bound) == (sign == "≥")
        target = f"{sign} {bound}: {'yes' if met else 'NO'}" if sign else ""
        rows.append([title, *cells, f"{ours / triton:.2f}", target, *cpu])
    head = ["workload", "Triton", "ours", "ours / Triton", "target", "Triton CPU µs/req"]
    lines = [
        "# Ours against the real Triton 2.51 (issue 25)",
        "",
        f"Command: `{args.command}`  ",
        f"Commit {short_commit()}; {os.cpu_count()} CPUs; load average {load0} at the start, "
        f"{loadavg()} at the end (1/5/15 min); client: {client} (req/s), perf_analyzer 2.45 "
        f"(p50); {args.rounds} round(s) of {args.duration:g} s windows, one server loaded at "
        "a time, the order alternating; medians over rounds.",
        "",
        __doc__.split("\n\n")[1],  # what each serves and what is measured
        "",
        *table([*head, "ours CPU µs/req"], rows, "lrrrlrr"),
        "",
        "Every round (req/s; p50 ms):",
        "",
    ]
    for x in servers:
        rounds = {k: [f"{s.req_s:.0f}" for s in v] for k, v in x.samples.items()}
        rounds["simple p50"] = [f"{p:.3f}" for p in x.p50_ms]
        lines += [f"- {x.label}, {k}: {', '.join(v)}" for k, v in rounds.items() if v]
    return "\n".join(lines) + "\n"


@register
class TritonCompare(Scenario):
    """Ours against the real Triton 2.51: throughput (h2load) and p50 (perf_analyzer)."""

    name = "triton-compare"

    @staticmethod
    def add_cli_args(p: argparse.ArgumentParser) -> None:
        quick = {"duration": 3.0, "rounds": 1, "latency_seconds": 1.0}
        window_args(p, 8.0, rounds=3, quick="short run, prints only", quick_values=quick)
        p.add_argument("--latency-seconds", type=float, default=2.0, help="perf_analyzer window")
        p.add_argument("--triton", type=Path, default=REFERENCE, help="start_triton.sh")
        p.add_argument("--perf-analyzer", type=Path, default=PERF_ANALYZER)
        p.add_argument("--only", nargs="*", default=[], help="workload keys and/or latency")
        p.add_argument("--out", type=Path, help="report (default results/triton_compare.md)")

    @staticmethod
    def run(args: argparse.Namespace) -> int:
        missing = [str(f) for f in (args.triton, args.perf_analyzer) if not f.exists()]
        if missing:
            hint = "the reference's README; loadtest/README.md, 'perf_analyzer on these machines'"
            print(f"triton-compare: skipped, no {', '.join(missing)} ({hint})", file=sys.stderr)
            return 2
        client, load0 = "h2load" if have_h2load() else "Python loadgen (no h2load)", loadavg()
        with tempfile.TemporaryDirectory(prefix="triton-compare-") as tmp:
            ours, theirs = repositories(Path(tmp))
            ports = ["--grpc-port", str(free_port()), "--http-port", str(free_port())]
            triton = LoggedProcess([str(args.triton), "--model-repository", str(theirs), *ports])
            servers = [Server("Triton", triton), Server("ours", service(ours, ALLOW_METRICS))]
            try:
                for server in servers:
                    server.process.start(timeout=120)
                workloads = [w for w in WORKLOADS if not args.only or w.key in args.only]
                p50 = partial(perf_p50, args.perf_analyzer, seconds=args.latency_seconds)
                alternate(servers, workloads, h2load_bodies(Path(tmp)), args, p50)
            finally:
                for server in servers:
                    server.process.stop()
        out = args.out or (None if args.quick or args.only else RESULTS / "triton_compare.md")
        publish(render(servers, args, client, load0), out)
        return 0
