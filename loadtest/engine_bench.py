"""Engine capacity: descriptors in, batches executed, descriptors out; no gRPC.

The engine runs as it does under ``--frontends N`` (``service.engine.main.run_engine``,
its own process, models loaded from a temporary repository); this process plays one
frontend: an ``EngineClient`` keeps ``--concurrency`` requests in flight on add_sub
([1, 16] FP32 inputs, the per-request cost of the server) with and without dynamic
batching. The figure is the engine's CPU per request (/proc, all its threads), i.e. how
many requests one core of engine can carry: the client's own cost is not in it, and
other processes on the machine do not change it much. Run from the repository root:

    .venv/bin/python loadtest/engine_bench.py [--duration 5] [--concurrency 256]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import secrets
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from metrics import loop_thread_seconds, process_cpu_seconds

from service.config import MetricsConfig, ServerConfig
from service.engine.main import run_engine
from service.frontend.client import EngineClient
from service.types import InferRequest, InputTensor

ROOT = Path(__file__).resolve().parents[1]
ADD_SUB = ROOT / "service" / "default_repository" / "add_sub"
BATCHING = "dynamic_batching { max_queue_delay_microseconds: 500 }"
#: name -> (ONNX add_sub, or the built-in identity backend; dynamic batching or not)
MODELS = {
    "identity_batch": ("identity", BATCHING),
    "identity_nobatch": ("identity", ""),
    "add_sub_batch": ("onnx", BATCHING),
    "add_sub_nobatch": ("onnx", ""),
}
IDENTITY = """backend: "identity"
max_batch_size: 64
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] },
        { name: "INPUT1" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] },
         { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ -1 ] } ]
"""


def write_repository(root: Path) -> None:
    config = (ADD_SUB / "config.pbtxt").read_text()
    for name, (kind, extra) in MODELS.items():
        (root / name / "1").mkdir(parents=True)
        if kind == "identity":
            text = IDENTITY
        else:
            shutil.copy(ADD_SUB / "1" / "model.onnx", root / name / "1" / "model.onnx")
            text = config.replace('name: "add_sub"', f'name: "{name}"')
            text = text.replace("max_batch_size: 8", "max_batch_size: 64")
        (root / name / "config.pbtxt").write_text(text + extra + "\n")


def request(model: str) -> InferRequest:
    data = np.ones((1, 16), np.float32).tobytes()
    return InferRequest(
        model_name=model,
        inputs=[
            InputTensor("INPUT0", "FP32", (1, 16), raw=data),
            InputTensor("INPUT1", "FP32", (1, 16), raw=data),
        ],
    )


async def drive(
    client: EngineClient, model: str, concurrency: int, warmup: float, duration: float, pid: int
) -> dict[str, float]:
    done = 0
    stop_at = 0.0
    loop = asyncio.get_running_loop()

    async def worker() -> None:
        nonlocal done
        req = request(model)
        while loop.time() < stop_at:
            await client.infer(req)
            done += 1

    stop_at = loop.time() + warmup
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    done = 0
    cpu0 = process_cpu_seconds(pid) or 0.0
    loop0 = loop_thread_seconds(pid)
    self0 = time.process_time()
    start = loop.time()
    stop_at = start + duration
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    elapsed = loop.time() - start
    engine_cpu = (process_cpu_seconds(pid) or 0.0) - cpu0
    client_cpu = time.process_time() - self0
    # The loop's thread against the rest (instance threads): which one caps the engine.
    loop_cpu = loop_thread_seconds(pid) - loop0
    return {
        "requests": done,
        "req_per_s": done / elapsed,
        "engine_cores": engine_cpu / elapsed,
        "engine_us_per_req": 1e6 * engine_cpu / max(done, 1),
        "capacity_per_core": done / engine_cpu if engine_cpu else float("nan"),
        "loop_us_per_req": 1e6 * loop_cpu / max(done, 1),
        "loop_cores": loop_cpu / elapsed,
        "client_cores": client_cpu / elapsed,
    }


async def main_async(
    args: argparse.Namespace, address: str, pid: int
) -> list[tuple[str, dict[str, float]]]:
    client = EngineClient(address, 1)
    await client.connect()
    rows = []
    for _ in range(args.rounds):
        for model in args.models:
            row = await drive(client, model, args.concurrency, args.warmup, args.duration, pid)
            rows.append((model, row))
    client.close()
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--warmup", type=float, default=1.0)
    parser.add_argument("--concurrency", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp)
        write_repository(repo)
        config = ServerConfig(model_repositories=(repo,), metrics=MetricsConfig(enabled=False))
        address = f"\0engine-bench-{os.getpid()}-{secrets.token_hex(4)}"
        ctx = multiprocessing.get_context("spawn")
        ours, theirs = ctx.Pipe()
        engine = ctx.Process(target=run_engine, args=(config, address, theirs))
        engine.start()
        theirs.close()
        kind, _ = ours.recv()
        assert kind == "ready", kind
        try:
            rows = asyncio.run(main_async(args, address, engine.pid or 0))
        finally:
            os.kill(engine.pid or 0, signal.SIGTERM)
            engine.join(30)
    print(
        f"engine_bench: concurrency {args.concurrency}, {args.duration:.0f} s windows, "
        f"{os.cpu_count()} cores"
    )
    print(
        "| model | req/s | engine cores | engine µs/req | capacity req/s per engine core "
        "| loop thread µs/req | loop thread cores | client cores |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for model, r in rows:
        print(
            f"| {model} | {r['req_per_s']:,.0f} | {r['engine_cores']:.2f} | "
            f"{r['engine_us_per_req']:.1f} | {r['capacity_per_core']:,.0f} | "
            f"{r['loop_us_per_req']:.1f} | {r['loop_cores']:.2f} | {r['client_cores']:.2f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
