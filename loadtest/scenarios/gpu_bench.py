"""GPU: served throughput with dynamic batching vs in-process onnxruntime CUDA (gpu-bench).

``--models`` on ``KIND_GPU`` with ``dynamic_batching``: by default the micro models, an MLP
(``--width`` 4096, 3 layers) and a small CNN (2 convolutions, 64x64 RGB), which say what the
serving path costs; ``resnet50``, ``resnet50_fp16`` and ``bert`` (loadtest/gpu_models.py:
ResNet-50 at 224 x 224, BERT-base at sequence 128, random weights) say what a user's model
gets. Closed-loop at each ``--concurrency`` from ``--processes`` clients, NVML's GPU
utilization sampled through every window; with ``--perf-analyzer``, each model's p50 at c=1
from Triton's C++ client too (the Python client's own cost is in its figure); with the server
stopped, onnxruntime CUDA in this process at the batch sizes the server executed (IO binding
as the server does it, and plain ``session.run``; the better is the ceiling). Writes
``results/gpu/report.md`` and ``results.json``; targets at concurrency 64: served /
in-process >= TARGETS (issue 36). Without a usable GPU it says why and exits with 2;
``--device cpu`` runs the same plumbing on the CPU, to check the scenario itself (its
numbers say nothing).

    .venv/bin/python -m loadtest gpu-bench            # about 6 minutes on one GPU
    .venv/bin/python -m loadtest gpu-bench --quick    # smoke run, about 1 minute
    .venv/bin/python -m loadtest gpu-bench --models resnet50 resnet50_fp16 bert \\
        --concurrency 1 8 64 128 --perf-analyzer ~/perf-analyzer/bin/perf_analyzer
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
from models import mlp_model
from server_process import FRONTENDS, ServerProcess

from loadtest import RESULTS
from loadtest.gpu_models import bert_base, cnn_model, resnet50
from loadtest.loadgen import LoadSpec, run_load
from loadtest.perf_analyzer import perf_analyzer_p50
from loadtest.report import fmt, table, write_json
from loadtest.repository import batching, onnx_model, parameters
from loadtest.scenario import Scenario, register, window_args
from loadtest.scenarios.batching import ceiling_size
from service.backends.onnxruntime.binding import BoundRunner, PinnedBuffers
from service.gpus import inventory

CUDA = "CUDAExecutionProvider"
TARGET_CONCURRENCY = 64
#: served / in-process at the executed batch, at TARGET_CONCURRENCY (issue 36); the realistic
#: models also want the GPU >= 80 % busy there.
TARGETS = {"mlp": 0.5, "cnn": 0.8, "resnet50": 0.9, "resnet50_fp16": 0.9, "bert": 0.9}
REALISTIC = ("resnet50", "resnet50_fp16", "bert")
TARGET_BUSY = 0.8
MAX_BATCH = 256
#: --conv-algo-search -> Triton's cudnn_conv_algo_search parameter value. EXHAUSTIVE (Triton's
#: and onnxruntime's default) benchmarks every convolution algorithm the first time an instance
#: sees an input shape; under dynamic batching every new batch size is a new shape.
CONV_ALGO_SEARCH = {"exhaustive": 0, "heuristic": 1, "default": 2}


def no_gpu_reason() -> str | None:
    if CUDA not in ort.get_available_providers():
        return f"onnxruntime {ort.__version__} has no CUDA provider (install onnxruntime-gpu)"
    if not inventory().supported():
        return "NVML finds no GPU (no driver, no nvidia-ml-py, or CUDA_VISIBLE_DEVICES hides it)"
    return None


def build_repository(root: Path, args: argparse.Namespace) -> dict[str, Path]:
    """mlp and cnn on the GPU (``KIND_CPU`` with ``--device cpu``) with dynamic batching."""
    extra = batching(args.delay_us)
    extra += "optimization { cuda { graphs: true } }\n" if args.cuda_graphs else ""
    extra += parameters({"cudnn_conv_algo_search": str(CONV_ALGO_SEARCH[args.conv_algo_search])})
    w, kind = args.width, "KIND_GPU" if args.device == "gpu" else "KIND_CPU"
    image = [3, 224, 224]
    models = {  # built only when asked: BERT-base alone is 437 MB of weights
        "mlp": lambda: (
            mlp_model(width=w, layers=3),
            [("INPUT0", "FP32", [w])],
            [("OUTPUT0", "FP32", [w])],
        ),
        "cnn": lambda: (
            cnn_model(),
            [("INPUT0", "FP32", [3, 64, 64])],
            [("OUTPUT0", "FP32", [10])],
        ),
        "resnet50": lambda: (
            resnet50(),
            [("INPUT0", "FP32", image)],
            [("OUTPUT0", "FP32", [1000])],
        ),
        "resnet50_fp16": lambda: (
            resnet50(np.float16),
            [("INPUT0", "FP16", image)],
            [("OUTPUT0", "FP16", [1000])],
        ),
        "bert": lambda: (
            bert_base(),
            [("INPUT_IDS", "INT64", [128])],
            [("OUTPUT0", "FP32", [768])],
        ),
    }
    config: dict[str, Any] = {"max_batch_size": MAX_BATCH, "instance_kind": kind, "extra": extra}
    config["instance_count"] = args.instances
    return {name: onnx_model(root, name, *models[name](), **config) for name in args.models}


@contextmanager
def gpu_utilization() -> Iterator[list[tuple[float, float]]]:
    """(time, NVML GPU utilization of device 0) every 0.2 s in a thread (none without NVML)."""
    samples: list[tuple[float, float]] = []
    stop = threading.Event()

    def sample() -> None:
        try:
            import pynvml

            pynvml.nvmlInit()
            handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        except Exception:  # no NVML: utilization n/a
            return
        while not stop.wait(0.2):
            samples.append((time.time(), pynvml.nvmlDeviceGetUtilizationRates(handle).gpu / 100))

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield samples
    finally:
        stop.set()
        thread.join()


async def serve_scenarios(url: str, pid: int, args: argparse.Namespace) -> list[dict[str, Any]]:
    base = LoadSpec(url, "", duration=args.duration, warmup=args.warmup, server_pid=pid)
    base = replace(base, processes=args.processes, max_requests=args.max_requests)
    rows = []
    for model in args.models:
        for concurrency in sorted(args.concurrency):
            with gpu_utilization() as samples:
                begin = time.time() + args.warmup
                result = await run_load(replace(base, model=model, concurrency=concurrency))
            busy = [u for t, u in samples if t >= begin]
            row = {**result.to_dict(), "gpu_utilization": sum(busy) / len(busy) if busy else None}
            print(f"  {result.summary()}, gpu util {row['gpu_utilization']}", file=sys.stderr)
            rows.append(row)
    return rows


def perf_analyzer_latency(url: str, args: argparse.Namespace) -> dict[str, float]:
    """Each model's p50 (ms) at c=1 from perf_analyzer over gRPC; {} without one."""
    if args.perf_analyzer is None:
        return {}
    return {m: perf_analyzer_p50(args.perf_analyzer, m, url, seconds=3.0) for m in args.models}


def random_feed(session: ort.InferenceSession, batch: int) -> dict[str, np.ndarray[Any, Any]]:
    """Random inputs of ``batch`` samples in each input's dtype (ids small, in any vocab)."""
    rng, feed = np.random.default_rng(0), {}
    for arg in session.get_inputs():
        shape = [batch, *[int(d) for d in arg.shape[1:]]]
        if arg.type == "tensor(int64)":
            feed[arg.name] = rng.integers(0, 1000, shape, dtype=np.int64)
        else:
            dtype = np.float16 if arg.type == "tensor(float16)" else np.float32
            feed[arg.name] = rng.random(shape, dtype=np.float32).astype(dtype)
    return feed


def cuda_ceiling(
    path: Path, sizes: list[int], seconds: float, device: str = "gpu", search: str = "exhaustive"
) -> dict[int, dict[str, float]]:
    """Best samples/s per batch size: plain session.run and the server's IO binding, with the
    server's convolution algorithm search."""
    provider: Any = "CPUExecutionProvider"
    if device == "gpu":
        provider = (CUDA, {"cudnn_conv_algo_search": search.upper()})
    session = ort.InferenceSession(str(path), ort.SessionOptions(), providers=[provider])
    assert session.get_providers()[0] in (CUDA, "CPUExecutionProvider"), session.get_providers()
    gpu = ("cuda", 0, PinnedBuffers()) if device == "gpu" else ()
    runner = BoundRunner(session, *gpu)
    out: dict[int, dict[str, float]] = {}
    outputs = [o.name for o in session.get_outputs()]
    for batch in sizes:
        feed = random_feed(session, batch)
        calls = {"run": lambda f=feed: session.run(None, f)}
        calls["io_binding"] = lambda f=feed: runner.run(f, outputs)
        results = {}
        for name, call in calls.items():
            for _ in range(5):
                call()
            runs, start = 0, time.perf_counter()
            while runs == 0 or time.perf_counter() - start < seconds:
                call()
                runs += 1
            results[name] = batch * runs / (time.perf_counter() - start)
        out[batch] = {**results, "best": max(results.values())}
        if batch > 1:  # not in "best": what a batch size changing every run costs
            out[batch]["alternating"] = alternating(session, batch, seconds)
    runner.close()
    return out


def alternating(session: ort.InferenceSession, batch: int, seconds: float) -> float:
    """Samples/s of ``session.run`` with the batch size alternating between ``batch`` and
    ``batch - 1``, as dynamic batching feeds an instance. onnxruntime's CUDA Conv keeps the
    cuDNN plan of the last input shape only and rebuilds it on every change (nn/conv.cc,
    ``UpdateState``), so a convolutional model pays that per execution; an MLP does not."""
    feeds = [random_feed(session, batch), random_feed(session, batch - 1)]
    for feed in feeds:
        session.run(None, feed)
    runs, samples, start = 0, 0, time.perf_counter()
    while runs < 2 or time.perf_counter() - start < seconds:
        session.run(None, feeds[runs % 2])
        samples += batch - runs % 2
        runs += 1
    return samples / (time.perf_counter() - start)


def verdict(model: str, c: int, ratio: float, util: float | None) -> str:
    """The target line of one model at TARGET_CONCURRENCY (GPU busy only for REALISTIC)."""
    target = TARGETS[model]
    met = ratio >= target
    text = f"- {model} at c={c}: served / in-process {ratio:.2f} (>= {target})"
    if model in REALISTIC:
        busy = util is not None and util >= TARGET_BUSY
        met = met and busy
        text += f", GPU {'n/a' if util is None else f'{util:.0%}'} busy (>= {TARGET_BUSY:.0%})"
    return f"{text}: {'met' if met else 'NOT met'}"


def c1_latency(raw: dict[str, Any]) -> list[str]:
    """p50 at c=1 per model: the Python client's, perf_analyzer's, and one in-process batch
    of 1 (the best call's mean time); served minus in-process is what serving adds."""
    cells = []
    for row in raw["rows"]:
        model = row["spec"]["model"]
        if row["spec"]["concurrency"] != 1:
            continue
        one = raw["ceiling"][model].get("1")
        alone = 1e3 / one["best"] if one else None
        pa = raw.get("perf_analyzer", {}).get(model)
        served = row["latency_ms"]["p50"] if pa is None else pa
        added = served - alone if alone is not None else None
        cells.append([model, f"{row['latency_ms']['p50']:.3f}", fmt(pa, 3), fmt(alone, 3)])
        cells[-1].append(fmt(added, 3))
    if not cells:
        return []
    head = ["model", "p50 Python client (ms)", "p50 perf_analyzer (ms)", "in-process batch 1 (ms)"]
    head.append("served - in-process (ms)")
    lines = ["## Latency at c=1", "", *table(head, cells), ""]
    for model, _, pa, alone, added in cells:
        if alone != "n/a":
            tool = "perf_analyzer" if pa != "n/a" else "Python client"
            lines.append(f"- {model} at c=1: serving adds {added} ms ({tool}) to {alone} ms")
    return [*lines, ""]


def write_report(raw: dict[str, Any], out_dir: Path) -> str:
    cells, verdicts = [], []
    for row in raw["rows"]:
        model, c, batch = row["spec"]["model"], row["spec"]["concurrency"], row["mean_exec_batch"]
        ceiling = raw["ceiling"][model].get(str(ceiling_size(batch))) if batch else None
        ratio = row["infer_per_s"] / ceiling["best"] if ceiling else None
        util, lat = row["gpu_utilization"], row["latency_ms"]
        cells.append(
            [
                *(model, c, f"{row['infer_per_s']:.0f}", f"{lat['p50']:.2f}", f"{lat['p99']:.2f}"),
                *(fmt(batch, 1), "n/a" if util is None else f"{util:.0%}"),
                *(fmt(ceiling["best"] if ceiling else None, 0), fmt(ratio)),
            ]
        )
        if c == TARGET_CONCURRENCY and ratio is not None:
            verdicts.append(verdict(model, c, ratio, util))
    head = ["model", "concurrency", "infer/s", "p50 ms", "p99 ms", "mean exec batch", "GPU util"]
    head += ["in-process at that batch (samples/s)", "served / in-process"]
    lines = [f"# GPU benchmark: {raw['title']}", "", f"Command: `{raw['command']}`  "]
    lines += [f"Device: {raw['device']}; onnxruntime {raw['onnxruntime']}", "", *table(head, cells)]
    lines += ["", "## Target", "", *(verdicts or ["- no row at concurrency 64"]), ""]
    lines += c1_latency(raw)
    lines += ["## In-process onnxruntime CUDA (samples/s)", ""]
    lines += [
        "Each batch size run alone (the ceiling is the better of run and io_binding); "
        "alternating: session.run with the batch size changing every run, as dynamic "
        "batching feeds an instance (not in the ceiling).",
        "",
    ]
    for model, points in raw["ceiling"].items():
        text = ", ".join(
            f"batch {b}: run {p['run']:.0f}, io_binding {p['io_binding']:.0f}"
            + (
                f", alternating with {int(b) - 1}: {p['alternating']:.0f}"
                if "alternating" in p
                else ""
            )
            for b, p in points.items()
        )
        lines.append(f"- {model}: {text}")
    report = "\n".join(lines) + "\n"
    (out_dir / "report.md").write_text(report, encoding="utf-8")
    return report


@register
class GpuBench(Scenario):
    """GPU: served throughput with dynamic batching vs in-process onnxruntime CUDA."""

    name = "gpu-bench"

    @staticmethod
    def add_cli_args(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--models", nargs="+", choices=sorted(TARGETS), default=["mlp", "cnn"],
            help="what to serve: the micro models (default) or the realistic ones",
        )  # fmt: skip
        p.add_argument("--width", type=int, default=4096)
        p.add_argument("--instances", type=int, default=2, help="instances on the GPU")
        p.add_argument("--delay-us", type=int, default=500)
        p.add_argument("--cuda-graphs", action="store_true", help="optimization.cuda.graphs")
        p.add_argument(
            "--conv-algo-search",
            choices=sorted(CONV_ALGO_SEARCH),
            default="heuristic",
            help="cudnn_conv_algo_search of the models and of the in-process ceiling (default "
            "heuristic: exhaustive spends its search on every new batch size inside the windows)",
        )
        p.add_argument("--device", choices=("gpu", "cpu"), default="gpu", help=argparse.SUPPRESS)
        quick = {"concurrency": [1, 64], "duration": 3.0, "warmup": 1.0, "ceiling_s": 0.5}
        quick["out_dir"] = lambda args: args.out_dir / "quick"
        window_args(
            p, 10.0, 3.0, concurrency=[1, 8, 32, 64, 128, 256], processes=4,
            quick="c=1,64; 3 s windows", quick_values=quick,
        )  # fmt: skip
        p.add_argument("--max-requests", type=int, default=1_000_000)
        p.add_argument("--ceiling-s", type=float, default=2.0)
        p.add_argument(
            "--perf-analyzer", type=Path, default=None,
            help="perf_analyzer's path: each model's p50 at c=1 from it too",
        )  # fmt: skip
        p.add_argument("--out-dir", type=Path, default=RESULTS / "gpu")

    @staticmethod
    def run(args: argparse.Namespace) -> int:
        reason = no_gpu_reason() if args.device == "gpu" else None
        if reason is not None:
            print(
                f"gpu-bench: no usable GPU here: {reason}. Run it on a GPU machine "
                "(docs/gpu.md, 'Benchmark').",
                file=sys.stderr,
            )
            return 2
        with tempfile.TemporaryDirectory(prefix="gpu-bench-") as tmp:
            files = build_repository(Path(tmp), args)
            server = ServerProcess([Path(tmp)]).start(timeout=300)
            try:
                rows = asyncio.run(serve_scenarios(server.url, server.pid, args))
                latency = perf_analyzer_latency(server.url, args)
            finally:
                server_exit = server.stop(timeout=60)
            ceiling = {}
            for model, path in files.items():
                batches = [r["mean_exec_batch"] for r in rows if r["spec"]["model"] == model]
                sizes = sorted({ceiling_size(b) for b in batches if b} | {1})
                points = cuda_ceiling(
                    path, sizes, args.ceiling_s, args.device, args.conv_algo_search
                )
                ceiling[model] = {str(b): p for b, p in points.items()}
        gpus = inventory().gpus() if args.device == "gpu" else []
        device = "CPU (--device cpu: plumbing check only)"
        isolated = os.environ.get("SERVICE_INSTANCE_WORKERS") == "1" and FRONTENDS != "0"
        where = "worker processes" if isolated else "threads"  # decision 030
        if gpus:
            device = f"{gpus[0].name} (compute capability {gpus[0].capability})"
        raw = {
            "title": f"{', '.join(args.models)} (MLP 3x{args.width}), "
            f"{args.instances} GPU instances, "
            f"delay {args.delay_us} us, conv algo search {args.conv_algo_search}"
            + (", CUDA graphs" if args.cuda_graphs else "")
            + f"; server --frontends {FRONTENDS}, instances in {where}",
            "command": args.command,
            "device": device,
            "onnxruntime": ort.__version__,
            "server_exit": server_exit,
            "rows": rows,
            "ceiling": ceiling,
            "perf_analyzer": latency,
        }
        write_json(raw, args.out_dir / "results.json")
        print(write_report(raw, args.out_dir))
        errors = sum(r["errors"] for r in rows)
        return 0 if server_exit == 0 and errors == 0 else 1
