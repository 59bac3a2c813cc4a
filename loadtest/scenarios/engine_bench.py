"""Engine capacity: descriptors in, batches executed, descriptors out; no gRPC.

The engine runs as under ``--frontends N`` (its own process, models from a temporary
repository); this process plays one frontend, an ``EngineClient`` keeping
``--concurrency`` requests in flight on add_sub and the identity backend, with and without
dynamic batching. The figure is the engine's CPU per request (all its threads): how many
requests one core of engine carries, the client's own cost not in it.

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
from pathlib import Path

import numpy as np

from loadtest.loadgen import drive
from loadtest.metrics import engine_cpu
from loadtest.report import publish, table
from loadtest.repository import add_sub, batching, identity_backend
from loadtest.scenario import Scenario, register, window_args
from service.admission import Admission
from service.config import MetricsConfig, ServerConfig
from service.engine.main import run_engine
from service.frontend.client import EngineClient
from service.types import InferRequest, InputTensor

MODELS = ["identity_batch", "identity_nobatch", "add_sub_batch", "add_sub_nobatch"]


async def measure(args: argparse.Namespace, address: str, pid: int) -> list[list[object]]:
    client = EngineClient(address, 1)
    await client.connect()
    data = np.ones((1, 16), np.float32).tobytes()
    rows: list[list[object]] = []
    for _ in range(args.rounds):
        for model in args.models:
            inputs = [InputTensor(f"INPUT{i}", "FP32", (1, 16), raw=data) for i in (0, 1)]
            request = InferRequest(model_name=model, inputs=inputs)
            calls = [lambda r=request: client.infer(r)] * args.concurrency
            # The loop's thread against the rest (instance threads): which one caps the engine.
            w = await drive(calls, args.warmup, args.duration, sample=lambda: engine_cpu(pid))
            (engine, loop), requests = w.deltas, max(w.requests, 1)
            rows.append(
                [
                    *(model, f"{w.requests / w.seconds:,.0f}", f"{engine / w.seconds:.2f}"),
                    *(f"{1e6 * engine / requests:.1f}", f"{w.requests / engine:,.0f}"),
                    *(f"{1e6 * loop / requests:.1f}", f"{loop / w.seconds:.2f}"),
                    f"{w.report.cpu_s / w.seconds:.2f}",
                ]
            )
    client.close()
    return rows


@register
class EngineBench(Scenario):
    """The engine process alone through its channel: requests/s per engine core."""

    name = "engine-bench"

    @staticmethod
    def add_cli_args(p: argparse.ArgumentParser) -> None:
        window_args(p, 5.0, 1.0, rounds=2, concurrency=256)
        p.add_argument("--models", nargs="+", default=MODELS, choices=MODELS)

    @staticmethod
    def run(args: argparse.Namespace) -> int:
        with tempfile.TemporaryDirectory() as tmp:
            repo = Path(tmp)
            for name in MODELS:
                extra = batching(500) if name.endswith("_batch") else ""
                if name.startswith("identity"):
                    identity_backend(repo, name, tensors=2, max_batch_size=64, extra=extra)
                else:
                    add_sub(repo, name, max_batch_size=64, extra=extra)
            config = ServerConfig(model_repositories=(repo,), metrics=MetricsConfig(enabled=False))
            address = f"\0engine-bench-{os.getpid()}-{secrets.token_hex(4)}"
            ctx = multiprocessing.get_context("spawn")
            ours, theirs = ctx.Pipe()
            admission = Admission(1, ctx)  # the refusal flags a supervisor would share
            engine = ctx.Process(target=run_engine, args=(config, address, admission, theirs))
            engine.start()
            theirs.close()
            kind, _ = ours.recv()
            assert kind == "ready", kind
            try:
                rows = asyncio.run(measure(args, address, engine.pid or 0))
            finally:
                os.kill(engine.pid or 0, signal.SIGTERM)
                engine.join(30)
        head = ["model", "req/s", "engine cores", "engine µs/req", "capacity req/s per engine core"]
        head += ["loop thread µs/req", "loop thread cores", "client cores"]
        lines = [
            f"Command: `{args.command}`",
            "",
            f"engine-bench: concurrency {args.concurrency}, {args.duration:.0f} s windows, "
            f"{os.cpu_count()} cores",
            "",
            *table(head, rows, "l" + "r" * 7),
        ]
        publish("\n".join(lines) + "\n", None)
        return 0
