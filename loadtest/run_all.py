"""The whole batching benchmark in one command, so that every ratio comes from one run.

Builds a model repository (the MLP, 3 x 1024 FP32 by default, without and with
dynamic_batching, plus add_sub), starts the server on a free loopback port, runs the
closed-loop scenarios, stops the server with SIGTERM (exit code checked), measures the
in-process onnxruntime ceiling with the server gone (so the two never share the cores), and
writes report.md, throughput_p99.png and results.json.

    .venv/bin/python loadtest/run_all.py            # full run, about 5 minutes
    .venv/bin/python loadtest/run_all.py --quick    # smoke run, under 90 s
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.metadata
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import grpc
import numpy as np
from ceiling import measure_ceiling
from loadgen import CHANNEL_OPTIONS, build_request, run_load
from loadresult import LoadSpec
from report import PLOT_NAME, ceiling_size, write_report

from inference import grpc_service_pb2_grpc as pb_grpc

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT / "tests"))
from models import make_config, mlp_model, mlp_reference, write_model  # noqa: E402
from server_process import DEFAULT_REPOSITORY, ServerProcess  # noqa: E402

WIDTH, LAYERS, MAX_BATCH = 1024, 3, 64
MLP_MODELS = ("mlp_nobatch", "mlp_batch")


def build_repository(root: Path, delay_us: int, parameters: dict[str, str] | None = None) -> Path:
    """Write mlp_nobatch, mlp_batch and add_sub under ``root``; return the MLP's ONNX file.

    ``parameters`` go into both MLP configs (e.g. the backend's thread settings)."""
    model = mlp_model(width=WIDTH, layers=LAYERS, seed=0)
    io = ([("INPUT0", "FP32", [WIDTH])], [("OUTPUT0", "FP32", [WIDTH])])
    batching = f"dynamic_batching {{ max_queue_delay_microseconds: {delay_us} }}"
    params = "".join(
        f'parameters {{ key: "{k}" value: {{ string_value: "{v}" }} }}\n'
        for k, v in (parameters or {}).items()
    )
    for name, extra in zip(MLP_MODELS, ("", batching), strict=True):
        config = make_config(name, *io, max_batch_size=MAX_BATCH, extra=params + extra)
        write_model(root, name, model, config)
    shutil.copytree(DEFAULT_REPOSITORY / "add_sub", root / "add_sub", dirs_exist_ok=True)
    return root / "mlp_batch" / "1" / "model.onnx"


async def check_outputs(url: str) -> None:
    """One request per MLP model, compared with the numpy reference: wrong answers fast are
    not throughput."""
    async with grpc.aio.insecure_channel(url, options=CHANNEL_OPTIONS) as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        for model in MLP_MODELS:
            request, _ = await build_request(stub, LoadSpec(url, model))
            reply = await stub.ModelInfer(request, timeout=30)
            x = np.frombuffer(request.raw_input_contents[0], "<f4").reshape(1, WIDTH)
            if reply.raw_output_contents:
                y = np.frombuffer(reply.raw_output_contents[0], "<f4").reshape(1, WIDTH)
            else:
                y = np.asarray(reply.outputs[0].contents.fp32_contents, "<f4").reshape(1, WIDTH)
            expected = mlp_reference(x, width=WIDTH, layers=LAYERS)
            if not np.allclose(y, expected, rtol=1e-4, atol=1e-4):
                raise RuntimeError(f"{model}: served output differs from the numpy reference")


def scenarios(concurrencies: list[int]) -> list[tuple[str, int]]:
    """MLP off/on interleaved per concurrency (slow drift hits both alike), then add_sub."""
    mlp = [(m, c) for c in concurrencies for m in MLP_MODELS]
    return [*mlp, ("add_sub", 1), ("add_sub", 8)]


async def run_scenarios(base: LoadSpec, concurrencies: list[int]) -> list[dict[str, Any]]:
    rows = []
    for model, c in scenarios(concurrencies):
        result = await run_load(replace(base, model=model, concurrency=c))
        print(f"  {result.summary()}", file=sys.stderr, flush=True)
        if result.first_error:
            print(f"    first error: {result.first_error}", file=sys.stderr)
        rows.append(result.to_dict())
    return rows


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def machine_info() -> dict[str, Any]:
    """What the numbers depend on: cores, CPU, library versions, commit."""
    cpuinfo = Path("/proc/cpuinfo")
    lines = cpuinfo.read_text().splitlines() if cpuinfo.exists() else []
    models = [ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("model name")]
    cpu = models[0] if models else platform.processor() or "unknown"
    git = subprocess.run(
        ["git", "describe", "--always", "--dirty"], cwd=REPO_ROOT, capture_output=True, text=True
    )
    return {
        "nproc": os.cpu_count(),
        "usable cores (affinity)": len(os.sched_getaffinity(0)),
        "cpu": cpu,
        "os": platform.platform(),
        "python": platform.python_version(),
        "onnxruntime": _version("onnxruntime"),
        "grpcio": _version("grpcio"),
        "protobuf": _version("protobuf"),
        "numpy": _version("numpy"),
        "commit": git.stdout.strip() or "unknown",
        "load average at start (1/5/15 min)": " / ".join(f"{x:.2f}" for x in os.getloadavg()),
    }


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--quick", action="store_true", help="short smoke run (< 90 s)")
    p.add_argument("--delay-us", type=int, default=500, help="max_queue_delay_microseconds")
    p.add_argument(
        "--width",
        type=int,
        default=WIDTH,
        help="MLP width (layers of width x width FP32); 1024 is RPC-bound on 2 vCPUs, "
        "4096 is compute-bound",
    )
    p.add_argument("--layers", type=int, default=LAYERS, help="MLP layers (more: more compute)")
    p.add_argument(
        "--mlp-parameter",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a config parameter for both MLP models (repeatable), e.g. allow_spinning=true",
    )
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32, 64])
    p.add_argument("--duration", type=float, help="measured seconds per scenario")
    p.add_argument("--warmup", type=float, help="warm-up seconds per scenario")
    p.add_argument("--processes", type=int, default=1, help="client processes per scenario")
    p.add_argument("--max-requests", type=int, help="hard cap on requests per scenario")
    p.add_argument("--out-dir", type=Path, help="default loadtest/results (quick: .../quick)")
    p.add_argument(
        "--write-repo", type=Path, help="only write the model repository here and exit (for ghz)"
    )
    args = p.parse_args(argv)
    args.parameters = {}
    for item in args.mlp_parameter:
        key, sep, value = item.partition("=")
        if not sep or not key:
            p.error(f"--mlp-parameter wants KEY=VALUE, got {item!r}")
        args.parameters[key] = value
    quick = {"duration": 2.0, "warmup": 0.5, "max_requests": 20_000, "ceiling_s": 1.0}
    full = {"duration": 20.0, "warmup": 3.0, "max_requests": 200_000, "ceiling_s": 4.0}
    for key, value in (quick if args.quick else full).items():
        if getattr(args, key, None) is None:
            setattr(args, key, value)
    results = REPO_ROOT / "loadtest" / "results"
    args.out_dir = args.out_dir or (results / "quick" if args.quick else results)
    return args


def _command() -> str:
    exe = Path(sys.executable)
    shown = exe.relative_to(REPO_ROOT) if exe.is_relative_to(REPO_ROOT) else exe
    return shlex.join([str(shown), *sys.argv])


def main(argv: list[str] | None = None) -> int:
    global WIDTH, LAYERS
    args = parse_args(argv)
    WIDTH, LAYERS = args.width, args.layers
    if args.write_repo:
        build_repository(args.write_repo, args.delay_us, args.parameters)
        print(f"wrote the model repository to {args.write_repo}", file=sys.stderr)
        return 0
    started = time.monotonic()
    machine = machine_info()
    concurrencies = sorted(args.concurrency)
    with tempfile.TemporaryDirectory(prefix="loadtest-repo-") as tmp:
        onnx_file = build_repository(Path(tmp), args.delay_us, args.parameters)
        server = ServerProcess([Path(tmp)]).start(timeout=120)
        print(f"server pid {server.pid} at {server.url}", file=sys.stderr)
        try:
            asyncio.run(check_outputs(server.url))
            base = LoadSpec(
                url=server.url,
                model="",
                duration=args.duration,
                warmup=args.warmup,
                processes=args.processes,
                max_requests=args.max_requests,
                server_pid=server.pid,
            )
            rows = asyncio.run(run_scenarios(base, concurrencies))
        finally:
            server_exit = server.stop(timeout=60)
        print(f"server exited with {server_exit}", file=sys.stderr)
        observed = {r["mean_exec_batch"] for r in rows if r["spec"]["model"] in MLP_MODELS}
        if None in observed:
            sizes = [1, 8, 32, 64]
        else:
            sizes = sorted({ceiling_size(b) for b in observed} | {1, MAX_BATCH})
        ceiling = [p.to_dict() for p in measure_ceiling(onnx_file, sizes, duration=args.ceiling_s)]
    machine["load average at end (1/5/15 min)"] = " / ".join(f"{x:.2f}" for x in os.getloadavg())
    settings = {
        "mode": "quick (smoke, numbers not meaningful)" if args.quick else "full",
        "dynamic_batching max_queue_delay_microseconds": args.delay_us,
        "max_batch_size": MAX_BATCH,
        "MLP": f"{LAYERS} x {WIDTH} FP32",
        "MLP config parameters": ", ".join(f"{k}={v}" for k, v in args.parameters.items())
        or "none",
        "warm-up s / measured s per scenario": f"{args.warmup} / {args.duration}",
        "client processes per scenario": args.processes,
        "max requests per scenario": args.max_requests,
        "ceiling seconds per batch size": args.ceiling_s,
        "wall time of the whole run s": f"{time.monotonic() - started:.0f}",
    }
    notes = []
    on = [r["mean_exec_batch"] for r in rows if r["spec"]["model"] == "mlp_batch"]
    if on and all(b is not None and b < 1.05 for b in on):
        notes.append(
            "mlp_batch executed batches of ~1 at every concurrency: the server's dynamic "
            "batcher is not active yet, so 'batching on' equals 'off' and ratio (a) is ~1."
        )
    notes.append("client and server share this machine's cores; CPU columns show the split.")
    noisy = [r for r in rows if (r["other_cpu_cores"] or 0.0) > 0.2]
    if noisy:
        worst = max(noisy, key=lambda r: r["other_cpu_cores"])
        notes.append(
            f"other processes on the machine used more than 0.2 cores during {len(noisy)} of "
            f"{len(rows)} scenarios (up to {worst['other_cpu_cores']:.2f} cores at "
            f"{worst['spec']['model']} c={worst['spec']['concurrency']}): those rows are noisy."
        )
    if server_exit != 0:
        notes.append(f"the server exited with code {server_exit} after SIGTERM (expected 0).")
    args.out_dir.mkdir(parents=True, exist_ok=True)
    raw = {
        "settings": settings,
        "machine": machine,
        "command": _command(),
        "delay_us": args.delay_us,
        "title": (
            f"MLP {LAYERS}x{WIDTH} FP32, max_queue_delay {args.delay_us} us, "
            f"{machine['nproc']} cores"
        ),
        "notes": notes,
        "server_exit": server_exit,
        "rows": rows,
        "ceiling": ceiling,
    }
    (args.out_dir / "results.json").write_text(json.dumps(raw, indent=2) + "\n", encoding="utf-8")
    write_report(raw, args.out_dir)
    print(f"wrote {args.out_dir / 'report.md'} and {args.out_dir / PLOT_NAME}", file=sys.stderr)
    if server_exit != 0:
        print(f"server exit code {server_exit}; log tail:\n{server.log[-3000:]}", file=sys.stderr)
    errors = sum(r["errors"] for r in rows)
    return 0 if server_exit == 0 and errors == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
