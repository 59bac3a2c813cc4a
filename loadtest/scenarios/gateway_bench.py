"""REST through the gateway vs gRPC direct: what does the extra hop cost?

The service and a gateway on 127.0.0.1 (the gateway's hop through the service's local
socket as scripts/serve.sh runs them; ``--transport grpc``: the gRPC hop), add_sub and a
3 x 1024 MLP: the real Triton clients at concurrency 1 (target <= 1.5x), minimal asyncio
clients over gRPC, REST binary and REST JSON with each process's CPU per request, and
REST throughput by gateway workers. loadtest/README.md, "The REST gateway".

    .venv/bin/python -m loadtest gateway-bench          # ~4 min; results/gateway_bench.md
    .venv/bin/python -m loadtest gateway-bench --quick  # ~1 min smoke run, prints only
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import socket
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import grpc
import numpy as np
from models import mlp_model
from server_process import LoggedProcess

from inference import grpc_service_pb2_grpc as pb_grpc
from loadtest import RESULTS
from loadtest.loadgen import CHANNEL_OPTIONS, Call, Window, drive, infer_request
from loadtest.metrics import tree_cpu_seconds
from loadtest.processes import gateway, service
from loadtest.report import loadavg, median, publish, table
from loadtest.repository import add_sub, onnx_model
from loadtest.scenario import Scenario, register, window_args
from loadtest.triton_clients import ClientRatio, measure_perf_analyzer, measure_tritonclient

PATHS = ("grpc", "rest-binary", "rest-json")
TARGET_RATIO = 1.5
Results = dict[tuple[Any, ...], list[Window]]  # by (model, concurrency, path) or (workers,)


class HttpClient:
    """One keep-alive HTTP/1.1 connection sending one prebuilt request."""

    def __init__(self, port: int, request: bytes) -> None:
        self.port, self.request = port, request

    async def open(self) -> HttpClient:
        self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
        self.writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return self

    async def call(self) -> None:
        self.writer.write(self.request)
        status, length = await self.reader.readline(), 0
        while (line := await self.reader.readline()) not in (b"\r\n", b""):
            if line[:15].lower() == b"content-length:":
                length = int(line[15:])
        await self.reader.readexactly(length)
        if not status.startswith(b"HTTP/1.1 200"):
            raise RuntimeError(f"gateway answered {status!r}")


def http_request(model: str, tensors: dict[str, np.ndarray[Any, Any]], binary: bool) -> bytes:
    """POST .../infer with the binary tensor extension both ways (what tritonclient.http
    sends with binary_data=True) or with JSON ``data`` in and out."""
    specs = [{"name": n, "shape": list(a.shape), "datatype": "FP32"} for n, a in tensors.items()]
    if binary:
        inputs = [{**s, "parameters": {"binary_data_size": a.nbytes}} for s, a in
                  zip(specs, tensors.values(), strict=True)]  # fmt: skip
        head = json.dumps({"inputs": inputs, "parameters": {"binary_data_output": True}})
        body = head.encode() + b"".join(a.tobytes() for a in tensors.values())
        kind = f"application/octet-stream\r\nInference-Header-Content-Length: {len(head)}"
    else:
        inputs = [
            {**s, "data": a.ravel().tolist()} for s, a in zip(specs, tensors.values(), strict=True)
        ]
        body, kind = json.dumps({"inputs": inputs}).encode(), "application/json"
    lines = f"POST /v2/models/{model}/infer HTTP/1.1\r\nHost: 127.0.0.1\r\n"
    lines += f"Content-Length: {len(body)}\r\nContent-Type: {kind}\r\n\r\n"
    return lines.encode() + body


async def run_path(
    path: str, model: str, concurrency: int, svc: LoggedProcess, gw: LoggedProcess,
    args: argparse.Namespace,
) -> Window:  # fmt: skip
    """Minimal clients on one path: grpc.aio straight to the service, one channel, inputs
    in ``raw_input_contents``; or one keep-alive connection per worker to the gateway."""
    if model == "add_sub":
        x = np.arange(16, dtype=np.float32).reshape(1, 16)
        tensors = {"INPUT0": x, "INPUT1": np.ones((1, 16), np.float32)}
    else:
        tensors = {"INPUT0": np.random.default_rng(0).standard_normal((1, 1024), np.float32)}

    def sample() -> tuple[float, ...]:  # CPU of each process and its children
        return tree_cpu_seconds(svc.pid) or 0.0, tree_cpu_seconds(gw.pid) or 0.0

    if path == "grpc":
        request = infer_request(model, tensors)
        async with grpc.aio.insecure_channel(svc.url, options=CHANNEL_OPTIONS) as channel:
            stub = pb_grpc.GRPCInferenceServiceStub(channel)
            calls: list[Call] = [lambda: stub.ModelInfer(request)] * concurrency
            return await drive(calls, args.warmup, args.duration, sample=sample)
    raw = http_request(model, tensors, path == "rest-binary")
    clients = await asyncio.gather(*(HttpClient(gw.port, raw).open() for _ in range(concurrency)))
    try:
        return await drive([c.call for c in clients], args.warmup, args.duration, sample=sample)
    finally:
        for client in clients:
            client.writer.close()


async def main_async(args: argparse.Namespace, load_before: str) -> int:
    matrix: Results = {}
    by_workers: Results = {}
    with tempfile.TemporaryDirectory(prefix="gateway_bench_") as tmp:
        repo = Path(tmp)
        add_sub(repo)
        io = ([("INPUT0", "FP32", [1024])], [("OUTPUT0", "FP32", [1024])])
        onnx_model(repo, "mlp", mlp_model(), *io, max_batch_size=64)
        local = str(repo / "rpc.sock") if args.transport == "local" else ""
        svc = service(repo, *(("--grpc-local-socket", local) if local else ())).start(timeout=60)
        gateways = {1: gateway(svc.url, local_socket=local).start()}
        try:
            urls = svc.url, gateways[1].url
            clients = [
                await asyncio.to_thread(measure_tritonclient, *urls, args.client_rounds, 300),
                await asyncio.to_thread(measure_perf_analyzer, *urls, args.perf_analyzer_rounds),
            ]
            for ratio in clients:
                print(f"{ratio.client}: {ratio.missing or f'{ratio.ratio:.2f}x'}", flush=True)
            if args.workers > 1:
                gateways[args.workers] = gateway(svc.url, args.workers, local).start()
            cases = [(m, c, p, 0) for m in args.models for c in args.concurrency for p in PATHS]
            if len(gateways) > 1:
                cases += [("add_sub", args.workers_concurrency, "rest-binary", n) for n in gateways]
            for round_ in range(args.rounds):  # the order alternates, so drift hits all alike
                for model, conc, path, workers in cases if round_ % 2 == 0 else cases[::-1]:
                    gw = gateways[workers or 1]
                    window = await run_path(path, model, conc, svc, gw, args)
                    key = (workers,) if workers else (model, conc, path)
                    (by_workers if workers else matrix).setdefault(key, []).append(window)
                    print(
                        f"{model} c={conc} {path} workers={workers or 1} round {round_}: "
                        f"{window.rps:,.0f} req/s, p50 {window.pct(50) * 1e3:,.0f} µs",
                        flush=True,
                    )
        finally:
            codes = [gw.stop() for gw in gateways.values()] + [svc.stop()]
    name = "gateway_bench.md" if args.transport == "local" else "gateway_bench_grpc.md"
    text = report(matrix, by_workers, clients, args, load_before)
    publish(text, None if args.quick else RESULTS / name)
    return 0 if not any(codes) else 1


def _us(windows: Sequence[Window], q: float | None = None) -> float:
    """Median over rounds of a latency percentile (``q``) or the mean, in µs."""
    if q is None:
        return median(float(np.mean(w.report.latencies_ms)) * 1e3 for w in windows)
    return median(w.pct(q) * 1e3 for w in windows)


def _cpu_us(windows: Sequence[Window], index: int) -> float:
    """Service (0) or gateway (1) CPU per request over every round, µs."""
    return sum(w.deltas[index] for w in windows) / sum(w.requests for w in windows) * 1e6


def _rps(windows: Sequence[Window]) -> str:
    return f"{median(w.rps for w in windows):,.0f}"


def report(
    matrix: Results, by_workers: Results, clients: list[ClientRatio], args: argparse.Namespace,
    load_before: str,
) -> str:  # fmt: skip
    hop = (
        "the service's local socket (`--grpc-local-socket`, as scripts/serve.sh runs them; "
        "`--transport grpc` measures the gRPC hop)."
        if args.transport == "local"
        else "gRPC (`--transport grpc`)."
    )
    lines = [
        "# Gateway benchmark: REST through the gateway vs gRPC direct",
        "",
        f"Command: `{args.command}`",
        f"Machine: {os.cpu_count()} CPUs, {platform.python_implementation()} "
        f"{platform.python_version()}, {platform.machine()}; load average before the run: "
        f"{load_before}, after: {loadavg()}. Clients, gateway and service share these CPUs.",
        "",
        f"The service runs in its default layout (one frontend per core); the gateway's hop to "
        f"it is {hop}",
        "",
        "## Real clients, add_sub, concurrency 1 (the target)",
        "",
        f"Each client's p50 through the gateway against its own p50 over gRPC straight to the "
        f"service; target <= {TARGET_RATIO}x. Median over alternating rounds (p50 per round).",
        "",
    ]
    cells = [
        [c.client, "-", "-", "-", f"not measured: {c.missing}", 0]
        if c.missing
        else [c.client, f"{c.grpc:,.0f}", f"{c.http:,.0f}", f"{c.ratio:.2f}x",
              "met" if c.ratio <= TARGET_RATIO else "**NOT met**", len(c.grpc_us)]
        for c in clients
    ]  # fmt: skip
    head = ["client", "gRPC p50 µs", "REST p50 µs", "ratio", "target", "rounds"]
    lines += [*table(head, cells), "", "## Minimal clients: where the gateway's time goes", ""]
    lines += [
        "Both clients are small asyncio loops in one process (one keep-alive connection per "
        "REST worker, one grpc.aio channel), so client overhead is alike and small. "
        f"Median over {args.rounds} alternating rounds.",
        "",
    ]
    cells = []
    for (model, conc, path), windows in matrix.items():
        direct = matrix.get((model, conc, "grpc"))
        ratios = ["", ""]
        if direct and path != "grpc":
            ratios = [
                f"{_us(windows, 50) / _us(direct, 50):.2f}x",
                f"{_us(windows) / _us(direct):.2f}x",
            ]
        gw = _cpu_us(windows, 1) if path != "grpc" else 0.0
        lat = [f"{_us(windows, q):,.0f}" for q in (50, 99, None)]
        cpu = [f"{_cpu_us(windows, 0):,.0f}", f"{gw:,.0f}"]
        cells.append([model, conc, path, _rps(windows), *lat, *ratios, *cpu])
    head = ["model", "conc", "path", "req/s", "p50 µs", "p99 µs", "mean µs", "p50 ratio"]
    lines += [*table([*head, "mean ratio", "service CPU µs/req", "gateway CPU µs/req"], cells), ""]
    if by_workers:
        lines += [
            f"## REST throughput by gateway worker processes (add_sub, binary, concurrency "
            f"{args.workers_concurrency})",
            "",
            "`python -m gateway --workers N` in front of the same service; alternating rounds.",
            "",
        ]
        cells = [
            [n, _rps(w), f"{_us(w, 50):,.0f}", f"{_us(w, 99):,.0f}", f"{_cpu_us(w, 1):,.0f}",
             f"{_cpu_us(w, 0):,.0f}"]
            for (n,), w in sorted(by_workers.items())
        ]  # fmt: skip
        head = ["workers", "req/s", "p50 µs", "p99 µs", "gateway CPU µs/req", "service CPU µs/req"]
        one, most = by_workers[(1,)], by_workers[(args.workers,)]
        gain = median(w.rps for w in most) / median(w.rps for w in one)
        lines += [*table(head, cells), "", f"Throughput {args.workers} / 1 workers: {gain:.2f}x."]
    return "\n".join(lines).rstrip() + "\n"


@register
class GatewayBench(Scenario):
    """REST through the gateway vs gRPC direct: real clients, minimal clients, workers."""

    name = "gateway-bench"

    @staticmethod
    def add_cli_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("--models", nargs="+", default=["add_sub", "mlp"])
        quick = {"rounds": 1, "duration": 1.0, "warmup": 0.5, "client_rounds": 2}
        quick["perf_analyzer_rounds"] = 1
        window_args(
            p, 3.0, 1.0, rounds=3, concurrency=[1, 32], quick="1 round of 1 s; print only",
            quick_values=quick,
        )  # fmt: skip
        p.add_argument("--client-rounds", type=int, default=10, help="tritonclient rounds of 300")
        p.add_argument("--perf-analyzer-rounds", type=int, default=3)
        p.add_argument("--workers", type=int, default=2, help="also a gateway with N workers")
        p.add_argument("--workers-concurrency", type=int, default=32)
        p.add_argument(
            "--transport", choices=("local", "grpc"), default="local",
            help="the gateway's hop to the service: its local socket (as scripts/serve.sh runs "
            "them) or gRPC",
        )  # fmt: skip

    @staticmethod
    def run(args: argparse.Namespace) -> int:
        load_before = loadavg()
        try:
            import uvloop
        except ImportError:
            return asyncio.run(main_async(args, load_before))
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            return runner.run(main_async(args, load_before))
