"""``--frontends 0 / 1 / 2`` side by side: throughput, server CPU per request, latency.

h2load (Debian's ``nghttp2-client``: a C client, so the client costs the shared cores
little) sends unary ModelInfer requests for add_sub ([1, 16] FP32 inputs, no batching,
and the same with dynamic batching) over several connections; the kernel spreads the
connections over the frontend processes. Server CPU is the whole process tree's
(supervisor, engine, frontends; /proc) divided by the requests the server counted as
successful (ModelStatistics, so gRPC errors that h2load would count as HTTP 200 are not
in it). p50 at concurrency 1 comes from a sync gRPC client. Modes are interleaved round
by round, so slow drift of a shared machine hits all of them. From the repository root:

    .venv/bin/python loadtest/scaling_bench.py [--rounds 2] [--duration 8] [--out FILE]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import grpc
import numpy as np

from inference import grpc_service_pb2 as pb
from inference import grpc_service_pb2_grpc as pb_grpc

sys.path.insert(0, str(Path(__file__).resolve().parent))
from h2grpc import grpc_body, h2load_output, model_successes
from loadresult import publish_report
from metrics import (
    loop_thread_seconds,
    machine_busy_seconds,
    process_cpu_seconds,
    tree_cpu_seconds,
)

ROOT = Path(__file__).resolve().parents[1]
ADD_SUB = ROOT / "service" / "default_repository" / "add_sub"
_STARTED = re.compile(r"Started GRPCInferenceService at [^\s:]+:(\d+)")
_ENGINE = re.compile(r"engine started \(pid (\d+)\)")
MODELS = {"add_sub": "", "add_sub_batch": "dynamic_batching { max_queue_delay_microseconds: 500 }"}
IDENTITY = """backend: "identity"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
"""
MIB_FLOATS = 1 << 18  # 1 MiB of FP32
#: (label, model, concurrency, tensor elements)
SCENARIOS = [
    ("add_sub c=64", "add_sub", 64, 16),
    ("add_sub c=8", "add_sub", 8, 16),
    ("add_sub batching c=32", "add_sub_batch", 32, 16),
    ("identity 1 MiB c=8", "identity", 8, MIB_FLOATS),
]


def write_repository(root: Path) -> None:
    config = (ADD_SUB / "config.pbtxt").read_text()
    for name, extra in MODELS.items():
        (root / name / "1").mkdir(parents=True)
        shutil.copy(ADD_SUB / "1" / "model.onnx", root / name / "1" / "model.onnx")
        text = config.replace('name: "add_sub"', f'name: "{name}"')
        text = text.replace("max_batch_size: 8", "max_batch_size: 64")
        (root / name / "config.pbtxt").write_text(text + extra + "\n")
    (root / "identity" / "1").mkdir(parents=True)
    (root / "identity" / "config.pbtxt").write_text(IDENTITY)


def request_body(model: str, width: int = 16) -> bytes:
    data = np.ones((1, width), np.float32).tobytes()
    request = pb.ModelInferRequest(model_name=model)
    names = ("INPUT0",) if model == "identity" else ("INPUT0", "INPUT1")
    for name in names:
        request.inputs.add(
            name=name, datatype="FP32", shape=[width] if model == "identity" else [1, width]
        )
        request.raw_input_contents.append(data)
    return grpc_body(request.SerializeToString())


class Server:
    def __init__(self, repo: Path, frontends: int) -> None:
        args = [sys.executable, "-m", "service", "--model-repository", str(repo)]
        args += ["--grpc-address", "127.0.0.1", "--grpc-port", "0", "--allow-metrics=false"]
        args += ["--frontends", str(frontends)]
        self.proc = subprocess.Popen(args, cwd=ROOT, stderr=subprocess.PIPE, text=True)
        assert self.proc.stderr is not None
        #: the engine process under --frontends N (N > 0): the one place every request
        #: passes, so its loop thread is the first suspect when frontends are left idle
        self.engine_pid: int | None = None
        for line in self.proc.stderr:
            if engine := _ENGINE.search(line):
                self.engine_pid = int(engine.group(1))
            match = _STARTED.search(line)
            if match:
                self.port = int(match.group(1))
                break
        else:
            raise RuntimeError(f"server with --frontends {frontends} did not start")
        self._drain = subprocess.Popen(["cat"], stdin=self.proc.stderr, stdout=subprocess.DEVNULL)
        self.channel = grpc.insecure_channel(f"127.0.0.1:{self.port}")
        self.stub = pb_grpc.GRPCInferenceServiceStub(self.channel)

    def stop(self) -> int:
        self.channel.close()
        self.proc.terminate()
        code = self.proc.wait(60)
        self._drain.wait(10)
        return code


def engine_cpu(pid: int | None) -> tuple[float, float]:
    """(whole process, loop thread) CPU seconds of the engine; NaN in one process."""
    if pid is None:
        return float("nan"), float("nan")
    return process_cpu_seconds(pid) or 0.0, loop_thread_seconds(pid)


def load_row(
    server: Server,
    model: str,
    body: Path,
    conns: int,
    streams: int,
    seconds: float,
    threads: int = 1,
) -> dict[str, float]:
    url = f"127.0.0.1:{server.port}"
    before_ok = model_successes(url, model)
    busy0 = machine_busy_seconds() or 0.0
    cpu0 = tree_cpu_seconds(server.proc.pid) or 0.0
    engine0 = engine_cpu(server.engine_pid)
    start = time.monotonic()
    out = h2load_output(url, body, conns, streams, seconds, threads, warmup=1.0)
    elapsed = time.monotonic() - start
    cpu = (tree_cpu_seconds(server.proc.pid) or 0.0) - cpu0
    engine1 = engine_cpu(server.engine_pid)
    busy = (machine_busy_seconds() or 0.0) - busy0
    ok = model_successes(url, model) - before_ok
    match = re.search(r"finished in ([\d.]+)s, ([\d.]+) req/s", out)
    rps = float(match.group(2)) if match else float("nan")
    # CPU and successes span warm-up + window; their ratio is the cost of one request.
    return {
        "rps": rps,
        "cpu_ms_per_req": 1000 * cpu / max(ok, 1),
        "server_cores": cpu / elapsed,
        "engine_cores": (engine1[0] - engine0[0]) / elapsed,
        "engine_loop_cores": (engine1[1] - engine0[1]) / elapsed,
        "others_cores": (busy - cpu) / elapsed,
    }


def p50_c1(server: Server, model: str, count: int) -> float:
    data = np.ones((1, 16), np.float32).tobytes()
    request = pb.ModelInferRequest(model_name=model)
    for name in ("INPUT0", "INPUT1"):
        request.inputs.add(name=name, datatype="FP32", shape=[1, 16])
        request.raw_input_contents.append(data)
    for _ in range(100):
        server.stub.ModelInfer(request)
    times = []
    for _ in range(count):
        t0 = time.perf_counter()
        server.stub.ModelInfer(request)
        times.append(time.perf_counter() - t0)
    return 1000 * float(np.percentile(times, 50))


def _cores(value: float) -> str:
    return "n/a" if np.isnan(value) else f"{value:.2f}"


def scaling_lines(
    rows: dict[tuple[int, str], list[dict[str, float]]], modes: list[int]
) -> list[str]:
    """Throughput of each mode over the first mode's, per scenario (the issue's 8 vs 1 ratio)."""
    if len(modes) < 2:
        return []
    base_mode = modes[0]
    out = ["", f"Throughput over `--frontends {base_mode}`, same run:", ""]
    out += ["| scenario | " + " | ".join(f"--frontends {m}" for m in modes[1:]) + " |"]
    out += ["|---|" + "---:|" * len(modes[1:])]
    for label, *_ in SCENARIOS:
        base = rows.get((base_mode, label))
        if not base:
            continue
        base_rps = float(np.median([r["rps"] for r in base]))
        cells = []
        for mode in modes[1:]:
            other = rows.get((mode, label))
            rps = float(np.median([r["rps"] for r in other])) if other else float("nan")
            cells.append(f"{rps / base_rps:.2f} x")
        out.append(f"| {label} | " + " | ".join(cells) + " |")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--modes", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--duration", type=float, default=8.0)
    parser.add_argument("--connections", type=int, default=8)
    # One h2load thread saturates near the 2-core box's server; on many cores the client
    # needs threads of its own, and more connections than frontends so that SO_REUSEPORT's
    # hash reaches every frontend.
    parser.add_argument("--client-threads", type=int, default=1)
    parser.add_argument("--latency-requests", type=int, default=2000)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    rows: dict[tuple[int, str], list[dict[str, float]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp) / "repo"
        write_repository(repo)
        bodies: dict[str, Path] = {}
        for label, model, _, width in SCENARIOS:
            bodies[label] = Path(tmp) / f"{len(bodies)}.bin"
            bodies[label].write_bytes(request_body(model, width))
        for round_index in range(args.rounds):
            modes = args.modes if round_index % 2 == 0 else list(reversed(args.modes))
            for mode in modes:
                server = Server(repo, mode)
                try:
                    for label, model, conc, _ in SCENARIOS:
                        streams = max(1, conc // args.connections)
                        conns = min(conc, args.connections)
                        row = load_row(
                            server,
                            model,
                            bodies[label],
                            conns,
                            streams,
                            args.duration,
                            args.client_threads,
                        )
                        rows.setdefault((mode, label), []).append(row)
                    p50 = p50_c1(server, "add_sub", args.latency_requests)
                    rows.setdefault((mode, "add_sub c=1"), []).append({"p50_ms": p50})
                finally:
                    code = server.stop()
                    assert code == 0, f"server --frontends {mode} exited with {code}"
    lines = [
        f"scaling_bench: {os.cpu_count()} cores, h2load {args.connections} connections "
        f"on {args.client_threads} thread(s), "
        f"{args.duration:.0f} s windows, {args.rounds} rounds (median of rounds)",
        "",
        "| --frontends | scenario | req/s | server CPU ms/req | server cores | engine cores "
        "| engine loop thread cores | others' cores | p50 c=1 ms |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for (mode, scenario), items in sorted(rows.items()):
        med = {k: float(np.median([r[k] for r in items])) for k in items[0]}
        if "p50_ms" in med:
            lines.append(f"| {mode} | {scenario} | | | | | | | {med['p50_ms']:.3f} |")
        else:
            lines.append(
                f"| {mode} | {scenario} | {med['rps']:,.0f} | {med['cpu_ms_per_req']:.3f} | "
                f"{med['server_cores']:.2f} | {_cores(med['engine_cores'])} "
                f"| {_cores(med['engine_loop_cores'])} | {med['others_cores']:.2f} | |"
            )
    lines += scaling_lines(rows, args.modes)
    publish_report("\n".join(lines) + "\n", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
