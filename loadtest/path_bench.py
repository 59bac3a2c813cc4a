"""Where a request's server CPU goes: our request path alone vs the same through gRPC.

Ratio (b) of the batching benchmark is bounded by the CPU serving costs per request (see
report.md, "Where the CPU goes"). This splits that cost, for one identity model with
dynamic batching (no model compute, so everything measured is serving):

- ``in-process``: ``InferenceServicer.ModelInfer`` called directly with a parsed request
  (decode, validation, dynamic batcher, instance-thread hand-off, statistics, encode):
  CPU seconds of this process per request (``time.process_time``);
- ``grpc ModelInfer``: the same model served by ``python -m service`` over loopback
  gRPC, closed loop from loadgen: server process CPU per request (/proc);
- ``grpc ServerLive``: the cheapest RPC there is, same server, same client loop: what
  grpc.aio costs per call before any of our code runs.

    .venv/bin/python loadtest/path_bench.py            # ~1 min; writes results/path_bench.md
    .venv/bin/python loadtest/path_bench.py --quick    # smoke run, prints only
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import grpc
import numpy as np
from loadgen import CHANNEL_OPTIONS, run_load
from loadresult import LoadSpec, publish_report
from metrics import process_cpu_seconds

from inference import grpc_service_pb2 as pb
from inference import grpc_service_pb2_grpc as pb_grpc

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))
sys.path.insert(0, str(REPO_ROOT / "tests"))
from server_process import ServerProcess  # noqa: E402

from service.core.lifecycle import ModelManager  # noqa: E402
from service.core.server import InferenceServer  # noqa: E402
from service.handlers.servicer import InferenceServicer  # noqa: E402

MODEL, WIDTH = "identity_batch", 4096
CONFIG = f"""
name: "{MODEL}" backend: "identity" max_batch_size: 64
input [{{ name: "INPUT0" data_type: TYPE_FP32 dims: [{WIDTH}] }}]
output [{{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [{WIDTH}] }}]
dynamic_batching {{ max_queue_delay_microseconds: 500 }}
"""


def write_repository(root: Path) -> Path:
    (root / MODEL / "1").mkdir(parents=True)
    (root / MODEL / "config.pbtxt").write_text(CONFIG, encoding="utf-8")
    return root


def infer_request() -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name=MODEL)
    tensor = request.inputs.add(name="INPUT0", datatype="FP32")
    tensor.shape.extend([1, WIDTH])
    request.raw_input_contents.append(np.ones((1, WIDTH), np.float32).tobytes())
    return request


class _Context:
    """What ModelInfer reads of a grpc.aio context when nothing fails."""

    def invocation_metadata(self) -> tuple[()]:
        return ()

    async def abort(self, code: Any, message: str) -> None:
        raise RuntimeError(f"{code}: {message}")


async def in_process(repo: Path, concurrency: int, requests: int) -> float:
    """CPU microseconds per request of our path with no gRPC around it."""
    models = ModelManager([repo])
    await models.start()
    servicer = InferenceServicer(InferenceServer(models), 2**31 - 1)
    request, context = infer_request(), _Context()

    async def worker(count: int) -> None:
        for _ in range(count):
            await servicer.ModelInfer(request, context)  # type: ignore[arg-type]

    try:
        await worker(200)  # warm-up
        per_worker = max(1, requests // concurrency)
        before = time.process_time()
        await asyncio.gather(*(worker(per_worker) for _ in range(concurrency)))
        return (time.process_time() - before) / (per_worker * concurrency) * 1e6
    finally:
        await models.unload_all()


async def server_live(url: str, pid: int, concurrency: int, seconds: float) -> float:
    """Server CPU microseconds per ServerLive call, closed loop at ``concurrency``."""
    async with grpc.aio.insecure_channel(url, options=CHANNEL_OPTIONS) as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        request = pb.ServerLiveRequest()
        calls = 0
        stop = time.perf_counter() + seconds

        async def worker() -> None:
            nonlocal calls
            while time.perf_counter() < stop:
                await stub.ServerLive(request, timeout=10)
                calls += 1

        await asyncio.gather(*(worker() for _ in range(concurrency)))  # warm-up round
        calls, stop = 0, time.perf_counter() + seconds
        before = process_cpu_seconds(pid)
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        after = process_cpu_seconds(pid)
    if before is None or after is None or not calls:
        return float("nan")
    return (after - before) / calls * 1e6


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--quick", action="store_true", help="short run, prints only")
    p.add_argument("--concurrency", type=int, default=64)
    args = p.parse_args(argv)
    seconds, requests = (2.0, 3000) if args.quick else (8.0, 20000)
    rows: list[tuple[str, float]] = []
    with tempfile.TemporaryDirectory(prefix="path-bench-") as tmp:
        repo = write_repository(Path(tmp))
        ours = asyncio.run(in_process(repo, args.concurrency, requests))
        rows.append(("in-process ModelInfer (our path, no gRPC)", ours))
        server = ServerProcess([repo]).start(timeout=60)
        try:
            spec = LoadSpec(
                url=server.url,
                model=MODEL,
                concurrency=args.concurrency,
                duration=seconds,
                warmup=1.0,
                max_requests=200_000,
                server_pid=server.pid,
            )
            served = asyncio.run(run_load(spec))
            cores, rate = served.server_cpu_cores, served.req_per_s
            grpc_infer = cores / rate * 1e6 if cores is not None and rate else float("nan")
            rows.append(("gRPC ModelInfer, server process", grpc_infer))
            live = asyncio.run(server_live(server.url, server.pid, args.concurrency, seconds))
            rows.append(("gRPC ServerLive, server process", live))
        finally:
            server.stop(timeout=30)
    lines = [
        "# Where a request's server CPU goes",
        "",
        "Command: `.venv/bin/python loadtest/path_bench.py`  ",
        f"Machine: {os.cpu_count()} CPUs; identity model [1, {WIDTH}] FP32 with dynamic "
        f"batching (500 us), closed loop at concurrency {args.concurrency}.",
        "",
        "| path | CPU µs per request |",
        "|---|--:|",
        *(f"| {name} | {value:.0f} |" for name, value in rows),
        "",
        f"grpc.aio's share of a served ModelInfer: {1 - ours / grpc_infer:.0%} "
        f"(ServerLive alone: {live / grpc_infer:.0%}).",
    ]
    results = REPO_ROOT / "loadtest" / "results" / "path_bench.md"
    publish_report("\n".join(lines) + "\n", None if args.quick else results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
