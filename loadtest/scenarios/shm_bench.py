"""Large tensors through system shared memory vs through the socket, in one run.

ONNX Identity (FP32 [-1]) at concurrency 1, per size (1 and 16 MiB): ``socket`` carries the
tensor in the messages, ``shm`` in POSIX shared-memory regions made as tritonclient makes
them (output written into a second region). req/s, p50 and the server tree's CPU per
request; rounds alternate the paths; every output is checked once per path.

    .venv/bin/python -m loadtest shm-bench               # ~2 min; writes results/shm_bench.md
    .venv/bin/python -m loadtest shm-bench --quick       # ~30 s smoke run, prints only
    .venv/bin/python -m loadtest shm-bench --server-arg=--frontends=2   # the split layout
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import sys
import tempfile
import uuid
from multiprocessing import shared_memory
from pathlib import Path
from typing import Any

import grpc
import numpy as np
from models import identity_model

from inference import grpc_service_pb2 as pb
from inference import grpc_service_pb2_grpc as pb_grpc
from loadtest import RESULTS
from loadtest.loadgen import CHANNEL_OPTIONS, Window, drive, infer_request
from loadtest.metrics import tree_cpu_seconds
from loadtest.processes import service
from loadtest.report import median, publish, table
from loadtest.repository import onnx_model
from loadtest.scenario import Scenario, register, window_args

MODEL, MIB = "identity_fp32", 1 << 20


def _region(size: int) -> shared_memory.SharedMemory:
    """A POSIX shared-memory object made as tritonclient.utils.shared_memory makes one."""
    name = f"shm_bench_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    return shared_memory.SharedMemory(name, create=True, size=size)


def shm_request(size: int, region_in: str, region_out: str) -> pb.ModelInferRequest:
    """Input and output named by ``shared_memory_*`` parameters: no tensor in the message."""
    request = pb.ModelInferRequest(model_name=MODEL)
    tensor = request.inputs.add(name="INPUT0", datatype="FP32", shape=[size // 4])
    output = request.outputs.add(name="OUTPUT0")
    for params, region in ((tensor.parameters, region_in), (output.parameters, region_out)):
        params["shared_memory_region"].string_param = region
        params["shared_memory_byte_size"].int64_param = size
    return request


async def measure(server: Any, args: argparse.Namespace) -> dict[tuple[float, str], list[Window]]:
    results: dict[tuple[float, str], list[Window]] = {}
    regions: list[shared_memory.SharedMemory] = []
    async with grpc.aio.insecure_channel(server.url, options=CHANNEL_OPTIONS) as channel:
        send = channel.unary_unary("/inference.GRPCInferenceService/ModelInfer")  # bytes
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        try:
            bodies: dict[float, dict[str, bytes]] = {}
            for size in args.sizes:
                values = np.random.default_rng(int(size)).standard_normal(
                    int(size * MIB) // 4, np.float32
                )
                names = (f"in_{size:g}", f"out_{size:g}")
                pair = [_region(values.nbytes) for _ in names]
                regions += pair
                np.frombuffer(pair[0].buf, np.float32)[:] = values
                for name, region in zip(names, pair, strict=True):
                    register_request = pb.SystemSharedMemoryRegisterRequest(
                        name=name, key="/" + region.name, byte_size=region.size
                    )
                    await stub.SystemSharedMemoryRegister(register_request)
                bodies[size] = {
                    "socket": infer_request(MODEL, {"INPUT0": values}).SerializeToString(),
                    "shm": shm_request(values.nbytes, *names).SerializeToString(),
                }
                reply = pb.ModelInferResponse.FromString(await send(bodies[size]["socket"]))
                assert reply.raw_output_contents[0] == values.tobytes(), "socket: wrong output"
                reply = pb.ModelInferResponse.FromString(await send(bodies[size]["shm"]))
                assert reply.raw_output_contents[0] == b"", "shm: data in the response"
                written = np.frombuffer(pair[1].buf, np.float32)  # a view: gone before close
                assert np.array_equal(written, values), "shm: wrong output"
                del written
            for index in range(args.rounds):
                for size in args.sizes:
                    order = ("socket", "shm") if index % 2 == 0 else ("shm", "socket")
                    for path in order:

                        async def call(body: bytes = bodies[size][path]) -> None:
                            pb.ModelInferResponse.FromString(await send(body))

                        window = await drive(
                            [call], args.warmup, args.duration, 20_000,
                            lambda: (tree_cpu_seconds(server.pid) or 0.0,),
                        )  # fmt: skip
                        results.setdefault((size, path), []).append(window)
                        print(
                            f"round {index + 1} {size:g} MiB {path:6}: {window.rps:8.1f} req/s  "
                            f"p50 {window.pct(50):7.2f} ms  server CPU "
                            f"{window.per_request(0) * 1e3:6.2f} ms/req", flush=True,
                        )  # fmt: skip
            await stub.SystemSharedMemoryUnregister(pb.SystemSharedMemoryUnregisterRequest())
        finally:
            for region in regions:
                region.close()
                region.unlink()
    return results


def report(results: dict[tuple[float, str], list[Window]], args: argparse.Namespace) -> str:
    def med(size: float, path: str, what: str) -> float:
        windows = results[(size, path)]
        return median(
            w.rps if what == "rps" else w.pct(50) if what == "p50" else w.per_request(0) * 1e3
            for w in windows
        )

    cells, ratios = [], []
    for size in args.sizes:
        for path in ("socket", "shm"):
            rps, p50, cpu = (med(size, path, what) for what in ("rps", "p50", "cpu"))
            rate = f"{rps * size * MIB / 1e6:.0f}"
            cells.append([f"{size:g} MiB", path, f"{rps:.1f}", f"{p50:.2f}", f"{cpu:.2f}", rate])
        speed = med(size, "shm", "rps") / med(size, "socket", "rps")
        cpu = med(size, "socket", "cpu") / med(size, "shm", "cpu")
        ratios.append([f"{size:g} MiB", f"{speed:.2f}x", f"{cpu:.2f}x"])
    head = ["size", "path", "req/s", "p50 ms", "server CPU ms/req", "MB/s (one way)"]
    lines = [
        "# Shared memory vs the socket (python -m loadtest shm-bench)",
        "",
        f"Command: `{args.command}`",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}; model `{MODEL}` (ONNX Identity, FP32); concurrency 1; "
        f"{args.rounds} rounds of {args.duration:g} s per path and size, medians; server "
        f"flags: {' '.join(args.server_arg) or '(none)'}.",
        "",
        *table(head, cells),
        "",
        *table(["size", "shm / socket throughput", "socket / shm server CPU per request"], ratios),
        "",
    ]
    return "\n".join(lines)


@register
class ShmBench(Scenario):
    """1 MiB and 16 MiB tensors through system shared memory vs through the socket."""

    name = "shm-bench"

    @staticmethod
    def add_cli_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("--sizes", type=float, nargs="+", default=[1, 16], help="MiB")
        quick = {"duration": 2.0, "warmup": 0.5, "rounds": 1}
        window_args(p, 6.0, 1.0, rounds=3, quick="short windows, print only", quick_values=quick)
        p.add_argument("--server-arg", action="append", default=[], help="passed to the service")
        p.add_argument("--out", type=Path, default=RESULTS / "shm_bench.md")

    @staticmethod
    def run(args: argparse.Namespace) -> int:
        with tempfile.TemporaryDirectory(prefix="shm_bench_") as tmp:
            io = ([("INPUT0", "FP32", [-1])], [("OUTPUT0", "FP32", [-1])])
            onnx_model(Path(tmp), MODEL, identity_model("FP32", ["n"]), *io)
            server = service(Path(tmp), "--allow-metrics", "false", *args.server_arg)
            server.start(timeout=90)
            try:
                results = asyncio.run(measure(server, args))
            finally:
                code = server.stop()
        text = report(results, args)
        if code != 0:
            print(f"{text}\nthe service exited with {code}", file=sys.stderr)
            return 1
        publish(text, None if args.quick else args.out)
        return 0
