"""Engine capacity: descriptors in, batches executed, descriptors out; no gRPC.

The engine runs as it does under ``--frontends N`` (``service.engine.main.run_engine``,
its own process, models loaded from a temporary repository); this process plays one
frontend: an ``EngineClient`` keeps ``--concurrency`` requests in flight on add_sub
([1, 16] FP32 inputs, the per-request cost of the server) with and without dynamic
batching. The figure is the engine's CPU per request (/proc, all its threads), i.e. how
many requests one core of engine can carry: the client's own cost is not in it, and
other processes on the machine do not change it much. Run from the repository root:

    .venv/bin/python -m loadtest engine-bench [--duration 5] [--concurrency 256]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import secrets
import signal
import tempfile
import time
from pathlib import Path

import numpy as np

from loadtest.metrics import loop_thread_seconds, process_cpu_seconds
from loadtest.report import publish, table
from loadtest.repository import add_sub, batching, identity_backend
from loadtest.scenario import Scenario, register
from service.config import MetricsConfig, ServerConfig
from service.engine.main import run_engine
from service.frontend.client import EngineClient
from service.types import InferRequest, InputTensor

BATCHING = batching(500)
#: name -> (ONNX add_sub, or the built-in identity backend; dynamic batching or not)
MODELS = {
    "identity_batch": ("identity", BATCHING),
    "identity_nobatch": ("identity", ""),
    "add_sub_batch": ("onnx", BATCHING),
    "add_sub_nobatch": ("onnx", ""),
}


def write_repository(root: Path) -> None:
    for name, (kind, extra) in MODELS.items():
        if kind == "identity":
            identity_backend(root, name, tensors=2, max_batch_size=64, extra=extra)
        else:
            add_sub(root, name, max_batch_size=64, extra=extra)


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


@register
class EngineBench(Scenario):
    """The engine process alone through its channel: requests/s per engine core."""

    name = "engine-bench"

    @staticmethod
    def add_cli_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("--duration", type=float, default=5.0)
        p.add_argument("--warmup", type=float, default=1.0)
        p.add_argument("--concurrency", type=int, default=256)
        p.add_argument("--rounds", type=int, default=2)
        p.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))

    @staticmethod
    def run(args: argparse.Namespace) -> int:
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
        head = ["model", "req/s", "engine cores", "engine µs/req"]
        head += ["capacity req/s per engine core", "loop thread µs/req", "loop thread cores"]
        cells = [
            [
                *(model, f"{r['req_per_s']:,.0f}", f"{r['engine_cores']:.2f}"),
                *(f"{r['engine_us_per_req']:.1f}", f"{r['capacity_per_core']:,.0f}"),
                *(f"{r['loop_us_per_req']:.1f}", f"{r['loop_cores']:.2f}"),
                f"{r['client_cores']:.2f}",
            ]
            for model, r in rows
        ]
        title = (
            f"engine-bench: concurrency {args.concurrency}, {args.duration:.0f} s windows, "
            f"{os.cpu_count()} cores"
        )
        lines = [
            f"Command: `{args.command}`",
            "",
            title,
            "",
            *table([*head, "client cores"], cells, "l" + "r" * 7),
        ]
        publish("\n".join(lines) + "\n", None)
        return 0
