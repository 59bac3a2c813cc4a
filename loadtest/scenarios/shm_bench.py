"""Large tensors through system shared memory vs through the socket, in one run.

Starts the service on 127.0.0.1 (port from its start-up line) with ``identity_fp32``
(``tests/models.py`` ``identity_model``: ONNX Identity, FP32 [-1], no batching), then for
each size (1 MiB and 16 MiB by default) drives ModelInfer closed-loop through two paths:

- ``socket``: the tensor in ``raw_input_contents`` and back in ``raw_output_contents``
  (the request is serialized once, up front; the client parses every response);
- ``shm``: the tensor in a POSIX shared-memory region (made as tritonclient makes one),
  named by ``shared_memory_*`` parameters, the output written into a second region; the
  messages carry no tensor bytes.

Per path: requests per second, latency p50, and server CPU per request (user + system CPU
of the server's process tree over the window, / requests). Paths alternate in rounds, so a
shared machine's drift hits both; each figure is the median over rounds. Every output is
checked once per path. Bounded: a fixed window per round and a request cap. Loopback only.

    .venv/bin/python -m loadtest shm-bench               # ~2 min; writes results/shm_bench.md
    .venv/bin/python -m loadtest shm-bench --quick       # ~30 s smoke run, prints only
    .venv/bin/python -m loadtest shm-bench --server-arg=--frontends=2   # the split layout

Needs the server environment with the dev extra (onnx builds the model); SERVICE_PYTHON
overrides the interpreter that runs the service, as in the tests.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from multiprocessing import shared_memory
from pathlib import Path
from typing import Any

import grpc
import numpy as np
from models import identity_model
from server_process import LoggedProcess

from inference import grpc_service_pb2 as pb
from inference import grpc_service_pb2_grpc as pb_grpc
from loadtest import RESULTS
from loadtest.metrics import tree_cpu_seconds
from loadtest.processes import service
from loadtest.report import publish
from loadtest.repository import onnx_model
from loadtest.scenario import Scenario, register

PATHS = ("socket", "shm")
MODEL = "identity_fp32"
MAX_REQUESTS = 20_000  # per measured window
MIB = 1 << 20
_METHOD = "/inference.GRPCInferenceService/ModelInfer"


# --------------------------------------------------------------------------- the paths


class Region:
    """A POSIX shared-memory object made the way tritonclient.utils.shared_memory makes
    one (multiprocessing.shared_memory), unlinked on close."""

    def __init__(self, size: int) -> None:
        self.name = f"shm_bench_{os.getpid()}_{uuid.uuid4().hex[:8]}"
        self.key = "/" + self.name
        self.size = size
        self.shm = shared_memory.SharedMemory(self.name, create=True, size=size)

    def array(self, count: int) -> np.ndarray[Any, Any]:
        return np.frombuffer(self.shm.buf, np.float32, count)

    def close(self) -> None:
        self.shm.close()
        self.shm.unlink()


@dataclass
class Path_:
    """One path at one size: the serialized request and how to check a response."""

    name: str
    body: bytes
    check: Any


def socket_path(values: np.ndarray[Any, Any]) -> Path_:
    request = pb.ModelInferRequest(model_name=MODEL)
    request.inputs.add(name="INPUT0", datatype="FP32", shape=[values.size])
    request.raw_input_contents.append(values.tobytes())

    def check(response: pb.ModelInferResponse) -> None:
        got = np.frombuffer(response.raw_output_contents[0], np.float32)
        assert np.array_equal(got, values), "socket path: wrong output"

    return Path_("socket", request.SerializeToString(), check)


def shm_path(values: np.ndarray[Any, Any], region_in: str, region_out: str, out: Region) -> Path_:
    request = pb.ModelInferRequest(model_name=MODEL)
    tensor = request.inputs.add(name="INPUT0", datatype="FP32", shape=[values.size])
    tensor.parameters["shared_memory_region"].string_param = region_in
    tensor.parameters["shared_memory_byte_size"].int64_param = values.nbytes
    output = request.outputs.add(name="OUTPUT0")
    output.parameters["shared_memory_region"].string_param = region_out
    output.parameters["shared_memory_byte_size"].int64_param = values.nbytes

    def check(response: pb.ModelInferResponse) -> None:
        assert response.raw_output_contents[0] == b"", "shm path: data in the response"
        assert np.array_equal(out.array(values.size), values), "shm path: wrong output"

    return Path_("shm", request.SerializeToString(), check)


@dataclass
class Window:
    path: str
    size_mib: float
    requests: int
    seconds: float
    server_cpu: float
    latencies_ms: list[float]

    @property
    def rps(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0

    @property
    def cpu_ms_per_request(self) -> float:
        return 1000 * self.server_cpu / self.requests if self.requests else float("nan")

    @property
    def p50(self) -> float:
        return statistics.median(self.latencies_ms) if self.latencies_ms else float("nan")


def run_window(
    call: Any, path: Path_, size_mib: float, server: LoggedProcess, duration: float, warmup: float
) -> Window:
    """Closed loop at concurrency 1: the next request as soon as the last one returns."""
    deadline = time.monotonic() + warmup
    while time.monotonic() < deadline:
        call(path.body)
    latencies: list[float] = []
    cpu0 = tree_cpu_seconds(server.pid) or 0.0
    start = time.monotonic()
    end = start + duration
    while time.monotonic() < end and len(latencies) < MAX_REQUESTS:
        t0 = time.perf_counter()
        pb.ModelInferResponse.FromString(call(path.body))
        latencies.append((time.perf_counter() - t0) * 1000)
    seconds = time.monotonic() - start
    return Window(
        path.name,
        size_mib,
        len(latencies),
        seconds,
        (tree_cpu_seconds(server.pid) or 0.0) - cpu0,
        latencies,
    )


# --------------------------------------------------------------------------- report


def table(results: dict[tuple[float, str], list[Window]]) -> list[str]:
    lines = [
        "| size | path | req/s | p50 ms | server CPU ms/req | MB/s (one way) |",
        "|---|---|---|---|---|---|",
    ]
    for (size, path), windows in results.items():
        rps = statistics.median(w.rps for w in windows)
        p50 = statistics.median(w.p50 for w in windows)
        cpu = statistics.median(w.cpu_ms_per_request for w in windows)
        rate = rps * size * MIB / 1e6
        lines.append(f"| {size:g} MiB | {path} | {rps:.1f} | {p50:.2f} | {cpu:.2f} | {rate:.0f} |")
    return lines


def ratios(results: dict[tuple[float, str], list[Window]], sizes: list[float]) -> list[str]:
    lines = [
        "| size | shm / socket throughput | socket / shm server CPU per request |",
        "|---|---|---|",
    ]
    for size in sizes:
        sock, shm = results[(size, "socket")], results[(size, "shm")]
        speed = statistics.median(w.rps for w in shm) / statistics.median(w.rps for w in sock)
        cpu = statistics.median(w.cpu_ms_per_request for w in sock) / statistics.median(
            w.cpu_ms_per_request for w in shm
        )
        lines.append(f"| {size:g} MiB | {speed:.2f}x | {cpu:.2f}x |")
    return lines


# --------------------------------------------------------------------------- main


@register
class ShmBench(Scenario):
    """1 MiB and 16 MiB tensors through system shared memory vs through the socket."""

    name = "shm-bench"

    @staticmethod
    def add_cli_args(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--sizes", type=float, nargs="+", default=[1, 16], help="MiB")
        parser.add_argument("--duration", type=float, default=6.0, help="seconds per window")
        parser.add_argument("--warmup", type=float, default=1.0)
        parser.add_argument("--rounds", type=int, default=3)
        parser.add_argument("--quick", action="store_true", help="short windows, print only")
        parser.add_argument(
            "--server-arg", action="append", default=[], help="passed to the service"
        )
        parser.add_argument("--out", type=Path, default=RESULTS / "shm_bench.md")

    @staticmethod
    def run(args: argparse.Namespace) -> int:
        if args.quick:
            args.duration, args.warmup, args.rounds = 2.0, 0.5, 1
        results: dict[tuple[float, str], list[Window]] = {}
        regions: list[Region] = []
        with tempfile.TemporaryDirectory(prefix="shm_bench_") as tmp:
            repo = Path(tmp)
            io = ([("INPUT0", "FP32", [-1])], [("OUTPUT0", "FP32", [-1])])
            onnx_model(repo, MODEL, identity_model("FP32", ["n"]), *io)
            server = service(repo, "--allow-metrics", "false", *args.server_arg).start(timeout=90)
            options = [
                ("grpc.max_send_message_length", -1),
                ("grpc.max_receive_message_length", -1),
            ]
            channel = grpc.insecure_channel(server.url, options=options)
            call = channel.unary_unary(_METHOD)  # bytes in, bytes out: no client-side encode
            stub = pb_grpc.GRPCInferenceServiceStub(channel)
            try:
                paths: dict[float, list[Path_]] = {}
                for size in args.sizes:
                    count = int(size * MIB) // 4
                    values = np.random.default_rng(int(size)).standard_normal(count, np.float32)
                    region_in, region_out = Region(values.nbytes), Region(values.nbytes)
                    regions += [region_in, region_out]
                    region_in.array(count)[:] = values
                    names = (f"in_{size:g}", f"out_{size:g}")
                    for name, region in zip(names, (region_in, region_out), strict=True):
                        stub.SystemSharedMemoryRegister(
                            pb.SystemSharedMemoryRegisterRequest(
                                name=name, key=region.key, byte_size=region.size
                            )
                        )
                    paths[size] = [socket_path(values), shm_path(values, *names, region_out)]
                    for path in paths[size]:
                        path.check(pb.ModelInferResponse.FromString(call(path.body)))
                for round_index in range(args.rounds):
                    for size in args.sizes:
                        order = paths[size] if round_index % 2 == 0 else paths[size][::-1]
                        for path in order:
                            window = run_window(
                                call, path, size, server, args.duration, args.warmup
                            )
                            results.setdefault((size, path.name), []).append(window)
                            print(
                                f"round {round_index + 1} {size:g} MiB {path.name:6}: "
                                f"{window.rps:8.1f} req/s  p50 {window.p50:7.2f} ms  "
                                f"server CPU {window.cpu_ms_per_request:6.2f} ms/req",
                                flush=True,
                            )
                stub.SystemSharedMemoryUnregister(pb.SystemSharedMemoryUnregisterRequest())
            finally:
                channel.close()
                code = server.stop()
                for region in regions:
                    region.close()
        keyed = {(s, p): results[(s, p)] for s in args.sizes for p in PATHS}
        report = [
            "# Shared memory vs the socket (python -m loadtest shm-bench)",
            "",
            f"Command: `{args.command}`",
            "",
            f"Machine: {platform.machine()}, {os.cpu_count()} cores, "
            f"Python {platform.python_version()}; model `{MODEL}` (ONNX Identity, FP32); "
            f"concurrency 1; {args.rounds} rounds of "
            f"{args.duration:g} s per path and size, medians; server flags: "
            f"{' '.join(args.server_arg) or '(none)'}.",
            "",
            *table(keyed),
            "",
            *ratios(keyed, args.sizes),
            "",
        ]
        text = "\n".join(report)
        if code != 0:
            print(text)
            print(f"the service exited with {code}", file=sys.stderr)
            return 1
        publish(text, None if args.quick else args.out)
        return 0
