"""Our unary path on add_sub, piece by piece, in one process and without gRPC.

cpu_bench.py --floors shows ours at about 1.5 x a floor (the bare servicer with its model
in a thread on ONNX Runtime), nearly all of it on the loop's thread. This splits that
thread's share:

- each pure step alone (timeit, best of 5): protobuf parse, decode, validation
  (``prepare_job``), ``build_outputs``, ``record_success``, encode, serialize;
- the hand-off at concurrency 8 (CPU of the loop's thread per request, and wall time):
  the floor's (``bare_servicer.ModelThread``: a queue in, ``call_soon_threadsafe`` out)
  running the floor's ONNX Runtime call and running our ``execute_batch``; our
  ``prepare_job`` + ``DefaultScheduler.submit``; the whole ``InferenceServer.infer``.

    .venv/bin/python loadtest/parts_bench.py                # ~1 min; results/parts_bench.md
    .venv/bin/python loadtest/parts_bench.py --quick        # prints only
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import time
import timeit
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import bare_servicer
import uvloop
from cpu_bench import WORKLOADS
from loadresult import publish_report

from inference import grpc_service_pb2 as pb

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))
from service.core import validation  # noqa: E402
from service.core.lifecycle import ModelManager  # noqa: E402
from service.core.server import InferenceServer  # noqa: E402
from service.handlers.codec import decode_infer_request, encode_infer_response  # noqa: E402
from service.scheduling.batch import execute_batch  # noqa: E402

CONCURRENCY = 8


def per_call(fn: Callable[[], object], number: int) -> float:
    """µs per call, best of five."""
    return min(timeit.repeat(fn, number=number, repeat=5)) / number * 1e6


async def concurrent(call: Callable[[], Awaitable[Any]], requests: int) -> tuple[float, float]:
    """(loop-thread CPU µs, wall µs) per request, CONCURRENCY callers in a closed loop."""

    async def caller(count: int) -> None:
        for _ in range(count):
            await call()

    await caller(200)  # warm-up
    each = requests // CONCURRENCY
    wall, cpu = time.perf_counter(), time.thread_time()
    await asyncio.gather(*(caller(each) for _ in range(CONCURRENCY)))
    done = each * CONCURRENCY
    return (time.thread_time() - cpu) / done * 1e6, (time.perf_counter() - wall) / done * 1e6


async def measure(repo: Path, number: int, requests: int, rounds: int) -> list[tuple[str, str]]:
    models = ModelManager([repo])
    await models.start()
    try:
        server = InferenceServer(models)
        request = WORKLOADS[0].request()
        wire = request.SerializeToString()
        decoded = decode_infer_request(request)
        model = models.get("add_sub", "")
        job = validation.prepare_job(model, decoded)
        response = await server.infer(decoded)
        timings = response.timings
        assert timings is not None
        arrays = {o.name: o.array for o in response.outputs}
        rows = [
            (
                "protobuf parse (ModelInferRequest.FromString)",
                lambda: pb.ModelInferRequest.FromString(wire),
            ),
            ("decode_infer_request", lambda: decode_infer_request(request)),
            ("prepare_job (validation)", lambda: validation.prepare_job(model, decoded)),
            ("build_outputs", lambda: validation.build_outputs(model, job, arrays)),
            (
                "record_success (statistics)",
                lambda: model.stats.record_success(1000, timings.queue_ns, timings.timings),
            ),
            ("encode_infer_response", lambda: encode_infer_response(response, 2**31 - 1)),
        ]
        out: list[tuple[str, str]] = []
        for name, fn in rows:
            out.append((name, f"{per_call(fn, number):.2f}"))
        message = encode_infer_response(response, 2**31 - 1)
        out.append(
            ("protobuf serialize (response)", f"{per_call(message.SerializeToString, number):.2f}")
        )

        assert model.scheduler is not None
        scheduler = model.scheduler
        instance = scheduler._pool.workers[0].instance  # type: ignore[attr-defined]
        floor_ort = bare_servicer.ModelThread(bare_servicer.onnxruntime_add_sub())
        floor_ours = bare_servicer.ModelThread(lambda a, b, c: execute_batch(instance, (job,)))
        raw, shape = request.raw_input_contents[0], [1, 16]

        async def ours_submit() -> object:
            return await scheduler.submit(validation.prepare_job(model, decoded))

        handoffs: list[tuple[str, Callable[[], Awaitable[Any]]]] = [
            ("floor: ModelThread, ONNX Runtime run", lambda: floor_ort(raw, raw, shape)),
            ("floor: ModelThread, our execute_batch", lambda: floor_ours(raw, raw, shape)),
            ("ours: prepare_job + DefaultScheduler.submit", ours_submit),
            ("ours: InferenceServer.infer (whole core)", lambda: server.infer(decoded)),
        ]
        for name, call in handoffs:
            samples = [await concurrent(call, requests) for _ in range(rounds)]
            cpu = statistics.median(s[0] for s in samples)
            wall = statistics.median(s[1] for s in samples)
            out.append((f"{name}, c={CONCURRENCY}", f"{cpu:.1f} (wall {wall:.1f})"))
        return out
    finally:
        await models.unload_all()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--quick", action="store_true", help="short run, prints only")
    args = p.parse_args(argv)
    number, requests, rounds = (2000, 4000, 1) if args.quick else (20000, 20000, 3)
    with tempfile.TemporaryDirectory(prefix="parts-bench-") as tmp:
        repo = Path(tmp)
        shutil.copytree(REPO_ROOT / "service" / "default_repository" / "add_sub", repo / "add_sub")
        rows = uvloop.run(measure(repo, number, requests, rounds))
    shown = argv if argv is not None else sys.argv[1:]
    lines = [
        "# Our unary path on add_sub, piece by piece (one process, no gRPC)",
        "",
        f"Command: `{' '.join(['.venv/bin/python loadtest/parts_bench.py', *shown])}`  ",
        f"{os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.2f} at the end. Pure steps: "
        "µs per call, best of 5 (timeit). Hand-offs: CPU µs of the loop's thread per request "
        f"(and wall µs per request) with {CONCURRENCY} callers, median of {rounds} round(s).",
        "",
        "| step | µs |",
        "|---|--:|",
        *(f"| {name} | {value} |" for name, value in rows),
    ]
    results = REPO_ROOT / "loadtest" / "results" / "parts_bench.md"
    publish_report("\n".join(lines) + "\n", None if args.quick else results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
