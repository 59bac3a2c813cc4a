"""REST through the gateway vs gRPC direct: what does the extra hop cost?

Starts the service and the gateway on 127.0.0.1 (ports picked by the OS, read from their
start-up lines) with a temporary repository holding ``add_sub`` (tiny: the per-request
cost) and ``mlp`` (``tests/models.py`` ``mlp_model()``: 3 x 1024 FP32, real compute), then
measures, in this order:

1. the target: real Triton clients (tritonclient, perf_analyzer) at concurrency 1 on
   add_sub, each through the gateway vs straight to the service (``triton_clients.py``);
2. minimal clients, every model x concurrency, through three paths (below);
3. REST throughput through a gateway with ``--workers 1`` and one with ``--workers N``
   (default 2) at concurrency 32.

The minimal clients' paths:

- ``grpc``: grpc.aio stub straight to the service, inputs in ``raw_input_contents``;
- ``rest-binary``: HTTP/1.1 keep-alive POST .../infer to the gateway, binary tensor
  extension both ways (what tritonclient.http sends with binary_data=True);
- ``rest-json``: the same with JSON ``data`` in and out.

Both clients are minimal asyncio loops in one process (one connection per REST worker,
one channel for gRPC), so client overhead is alike and small. Paths alternate in rounds,
so slow drift of a shared machine hits all of them; each figure is the median over rounds.
Every run is bounded (duration and a request cap) and touches only the loopback interface.

    .venv/bin/python -m loadtest gateway-bench          # ~4 min; results/gateway_bench.md
    .venv/bin/python -m loadtest gateway-bench --quick  # ~1 min smoke run, prints only

Needs the server environment with the dev extra (onnx builds the MLP); SERVICE_PYTHON
overrides the interpreter that runs the service and the gateway, as in the tests.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import socket
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import grpc
import numpy as np
from models import mlp_model
from server_process import LoggedProcess

from inference import grpc_service_pb2 as pb
from inference import grpc_service_pb2_grpc as pb_grpc
from loadtest import RESULTS
from loadtest.metrics import tree_cpu_seconds
from loadtest.processes import gateway, service
from loadtest.report import publish
from loadtest.repository import add_sub, onnx_model
from loadtest.scenario import Scenario, register
from loadtest.triton_clients import ClientRatio, measure_perf_analyzer, measure_tritonclient

PATHS = ("grpc", "rest-binary", "rest-json")
MAX_REQUESTS = 200_000  # per measured window, whatever the machine does
TARGET_RATIO = 1.5


def _loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def write_repository(repo: Path) -> None:
    add_sub(repo)
    io = ([("INPUT0", "FP32", [1024])], [("OUTPUT0", "FP32", [1024])])
    onnx_model(repo, "mlp", mlp_model(), *io, max_batch_size=64)


def _cpu(proc: LoggedProcess) -> float:
    """CPU of a process and its children (a gateway's workers, a split service)."""
    return tree_cpu_seconds(proc.pid) or 0.0


# --------------------------------------------------------------------------- requests


@dataclass(frozen=True)
class Payload:
    """One model's request in each wire form."""

    grpc: pb.ModelInferRequest
    binary_body: bytes
    binary_header_length: int
    json_body: bytes


def payload(model: str) -> Payload:
    if model == "add_sub":
        tensors = {
            "INPUT0": np.arange(16, dtype=np.float32).reshape(1, 16),
            "INPUT1": np.ones((1, 16), np.float32),
        }
    else:
        tensors = {"INPUT0": np.random.default_rng(0).standard_normal((1, 1024), np.float32)}
    request = pb.ModelInferRequest(model_name=model)
    inputs_binary, inputs_json = [], []
    for name, array in tensors.items():
        request.inputs.add(name=name, datatype="FP32", shape=array.shape)
        request.raw_input_contents.append(array.tobytes())
        spec = {"name": name, "shape": list(array.shape), "datatype": "FP32"}
        inputs_binary.append({**spec, "parameters": {"binary_data_size": array.nbytes}})
        inputs_json.append({**spec, "data": array.ravel().tolist()})
    head = json.dumps({"inputs": inputs_binary, "parameters": {"binary_data_output": True}})
    raw = b"".join(a.tobytes() for a in tensors.values())
    return Payload(
        grpc=request,
        binary_body=head.encode() + raw,
        binary_header_length=len(head),
        json_body=json.dumps({"inputs": inputs_json}).encode(),
    )


class HttpClient:
    """One keep-alive HTTP/1.1 connection with a pre-built request."""

    def __init__(self, port: int, request: bytes) -> None:
        self._port = port
        self._request = request
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def open(self) -> None:
        self._reader, self._writer = await asyncio.open_connection("127.0.0.1", self._port)
        sock = self._writer.get_extra_info("socket")
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    async def call(self) -> None:
        assert self._reader is not None and self._writer is not None
        self._writer.write(self._request)
        status = await self._reader.readline()
        length = 0
        while (line := await self._reader.readline()) not in (b"\r\n", b""):
            if line[:15].lower() == b"content-length:":
                length = int(line[15:])
        await self._reader.readexactly(length)
        if not status.startswith(b"HTTP/1.1 200"):
            raise RuntimeError(f"gateway answered {status!r}")

    async def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            await self._writer.wait_closed()


def http_request(model: str, body: bytes, header_length: int | None) -> bytes:
    lines = [
        f"POST /v2/models/{model}/infer HTTP/1.1",
        "Host: 127.0.0.1",
        f"Content-Length: {len(body)}",
    ]
    if header_length is not None:
        lines.append(f"Inference-Header-Content-Length: {header_length}")
        lines.append("Content-Type: application/octet-stream")
    else:
        lines.append("Content-Type: application/json")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


# --------------------------------------------------------------------------- load


@dataclass
class Window:
    requests: int
    seconds: float
    latencies_us: list[float]
    service_cpu_s: float
    gateway_cpu_s: float

    @property
    def rps(self) -> float:
        return self.requests / self.seconds

    def pct(self, q: float) -> float:
        return float(np.percentile(self.latencies_us, q))

    @property
    def mean(self) -> float:
        return statistics.fmean(self.latencies_us)


async def drive(
    calls: list[Callable[[], Awaitable[object]]],
    warmup: float,
    duration: float,
    service: LoggedProcess,
    gateway: LoggedProcess,
) -> Window:
    """Closed loop: each worker sends its next request when the previous one returned."""
    latencies: list[float] = []
    begin = time.perf_counter() + warmup
    end = begin + duration
    cpu: dict[str, float] = {}

    async def worker(call: Callable[[], Awaitable[object]]) -> None:
        while (now := time.perf_counter()) < end and len(latencies) < MAX_REQUESTS:
            await call()
            done = time.perf_counter()
            if now >= begin:
                latencies.append((done - now) * 1e6)

    async def sample() -> None:
        await asyncio.sleep(max(0.0, begin - time.perf_counter()))
        cpu["s0"], cpu["g0"] = _cpu(service), _cpu(gateway)
        await asyncio.sleep(max(0.0, end - time.perf_counter()))
        cpu["s1"], cpu["g1"] = _cpu(service), _cpu(gateway)

    await asyncio.gather(sample(), *(worker(c) for c in calls))
    return Window(len(latencies), duration, latencies, cpu["s1"] - cpu["s0"], cpu["g1"] - cpu["g0"])


async def run_path(
    path: str,
    model: str,
    concurrency: int,
    service: LoggedProcess,
    gateway: LoggedProcess,
    warmup: float,
    duration: float,
) -> Window:
    body = payload(model)
    if path == "grpc":
        options = [("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1)]
        async with grpc.aio.insecure_channel(service.url, options=options) as ch:
            stub = pb_grpc.GRPCInferenceServiceStub(ch)
            calls = [lambda: stub.ModelInfer(body.grpc) for _ in range(concurrency)]
            return await drive(calls, warmup, duration, service, gateway)
    if path == "rest-binary":
        raw = http_request(model, body.binary_body, body.binary_header_length)
    else:
        raw = http_request(model, body.json_body, None)
    clients = [HttpClient(gateway.port, raw) for _ in range(concurrency)]
    await asyncio.gather(*(c.open() for c in clients))
    try:
        return await drive([c.call for c in clients], warmup, duration, service, gateway)
    finally:
        await asyncio.gather(*(c.close() for c in clients))


# --------------------------------------------------------------------------- report


async def measure_matrix(
    args: argparse.Namespace, service: LoggedProcess, gateway: LoggedProcess
) -> dict[tuple[str, int, str], list[Window]]:
    """Minimal clients, every model x concurrency x path, paths alternating per round."""
    results: dict[tuple[str, int, str], list[Window]] = {}
    for model in args.models:
        for conc in args.concurrency:
            for round_ in range(args.rounds):
                order = PATHS if round_ % 2 == 0 else tuple(reversed(PATHS))
                for path in order:
                    if path not in args.paths:
                        continue
                    window = await run_path(
                        path, model, conc, service, gateway, args.warmup, args.duration
                    )
                    results.setdefault((model, conc, path), []).append(window)
                    print(
                        f"{model} c={conc} {path} round {round_}: {window.rps:,.0f} "
                        f"req/s, p50 {window.pct(50):,.0f} µs",
                        flush=True,
                    )
    return {
        k: results[k]
        for k in sorted(results, key=lambda k: (args.models.index(k[0]), k[1], PATHS.index(k[2])))
    }


async def measure_workers(
    args: argparse.Namespace, service: LoggedProcess, gateways: dict[int, LoggedProcess]
) -> dict[int, list[Window]]:
    """REST binary add_sub at --workers-concurrency through each gateway, alternating."""
    out: dict[int, list[Window]] = {}
    for round_ in range(args.rounds):
        order = sorted(gateways) if round_ % 2 == 0 else sorted(gateways, reverse=True)
        for count in order:
            window = await run_path(
                "rest-binary",
                "add_sub",
                args.workers_concurrency,
                service,
                gateways[count],
                args.warmup,
                args.duration,
            )
            out.setdefault(count, []).append(window)
            print(f"workers={count} round {round_}: {window.rps:,.0f} req/s", flush=True)
    return out


async def main_async(args: argparse.Namespace, load_before: str) -> int:
    with tempfile.TemporaryDirectory(prefix="gateway_bench_") as tmp:
        repo = Path(tmp)
        write_repository(repo)
        local = str(repo / "rpc.sock") if args.transport == "local" else ""
        svc = service(repo, *(("--grpc-local-socket", local) if local else ()))
        svc.start(timeout=60)
        gateways = {1: gateway(svc.url, local_socket=local).start()}
        try:
            grpc_url, http_url = svc.url, gateways[1].url
            clients = [
                await asyncio.to_thread(
                    measure_tritonclient, grpc_url, http_url, args.client_rounds, 300
                ),
                await asyncio.to_thread(
                    measure_perf_analyzer, grpc_url, http_url, args.perf_analyzer_rounds
                ),
            ]
            for ratio in clients:
                print(f"{ratio.client}: {ratio.missing or f'{ratio.ratio:.2f}x'}", flush=True)
            results = await measure_matrix(args, svc, gateways[1])
            workers: dict[int, list[Window]] = {}
            if args.workers > 1:
                gateways[args.workers] = gateway(svc.url, args.workers, local).start()
                workers = await measure_workers(args, svc, gateways)
        finally:
            codes = [gw.stop() for gw in gateways.values()] + [svc.stop()]
    text = report(results, clients, workers, args, load_before, _loadavg())
    name = "gateway_bench.md" if args.transport == "local" else "gateway_bench_grpc.md"
    publish(text, None if args.quick else RESULTS / name)
    return 0 if not any(codes) else 1


def median(windows: Sequence[Window], value: Callable[[Window], float]) -> float:
    return statistics.median(value(w) for w in windows)


def p50(w: Window) -> float:
    return w.pct(50)


def p99(w: Window) -> float:
    return w.pct(99)


def mean(w: Window) -> float:
    return w.mean


def rps(w: Window) -> float:
    return w.rps


def _clients(clients: list[ClientRatio]) -> list[str]:
    lines = [
        "## Real clients, add_sub, concurrency 1 (the target)",
        "",
        f"Each client's p50 through the gateway against its own p50 over gRPC straight to the "
        f"service; target <= {TARGET_RATIO}x. Median over alternating rounds (p50 per round).",
        "",
        "| client | gRPC p50 µs | REST p50 µs | ratio | target | rounds |",
        "|---|---|---|---|---|---|",
    ]
    for ratio in clients:
        if ratio.missing:
            lines.append(f"| {ratio.client} | - | - | - | not measured: {ratio.missing} | 0 |")
            continue
        verdict = "met" if ratio.ratio <= TARGET_RATIO else "**NOT met**"
        lines.append(
            f"| {ratio.client} | {ratio.grpc:,.0f} | {ratio.http:,.0f} | {ratio.ratio:.2f}x | "
            f"{verdict} | {len(ratio.grpc_us)} |"
        )
    return [*lines, ""]


def _matrix(results: dict[tuple[str, int, str], list[Window]], rounds: int) -> list[str]:
    lines = [
        "## Minimal clients: where the gateway's time goes",
        "",
        "Both clients are small asyncio loops in one process (one keep-alive connection per "
        "REST worker, one grpc.aio channel), so client overhead is alike and small. "
        f"Median over {rounds} alternating rounds.",
        "",
        "| model | conc | path | req/s | p50 µs | p99 µs | mean µs | p50 ratio | mean ratio "
        "| service CPU µs/req | gateway CPU µs/req |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (model, conc, path), windows in results.items():
        direct = results.get((model, conc, "grpc"))
        lat50, lat_mean = median(windows, p50), median(windows, mean)
        ratio_p50 = ratio_mean = ""
        if direct and path != "grpc":
            ratio_p50 = f"{lat50 / median(direct, p50):.2f}x"
            ratio_mean = f"{lat_mean / median(direct, mean):.2f}x"
        reqs = sum(w.requests for w in windows)
        svc = sum(w.service_cpu_s for w in windows) / reqs * 1e6
        gw = sum(w.gateway_cpu_s for w in windows) / reqs * 1e6 if path != "grpc" else 0.0
        lines.append(
            f"| {model} | {conc} | {path} | {median(windows, rps):,.0f} | {lat50:,.0f} | "
            f"{median(windows, p99):,.0f} | {lat_mean:,.0f} | {ratio_p50} | {ratio_mean} | "
            f"{svc:,.0f} | {gw:,.0f} |"
        )
    return [*lines, ""]


def _workers(workers: dict[int, list[Window]], concurrency: int) -> list[str]:
    if not workers:
        return []
    lines = [
        f"## REST throughput by gateway worker processes (add_sub, binary, concurrency "
        f"{concurrency})",
        "",
        "`python -m gateway --workers N` in front of the same service; alternating rounds.",
        "",
        "| workers | req/s | p50 µs | p99 µs | gateway CPU µs/req | service CPU µs/req |",
        "|---|---|---|---|---|---|",
    ]
    for count, windows in sorted(workers.items()):
        reqs = sum(w.requests for w in windows)
        gw = sum(w.gateway_cpu_s for w in windows) / reqs * 1e6
        svc = sum(w.service_cpu_s for w in windows) / reqs * 1e6
        lines.append(
            f"| {count} | {median(windows, rps):,.0f} | {median(windows, p50):,.0f} | "
            f"{median(windows, p99):,.0f} | {gw:,.0f} | {svc:,.0f} |"
        )
    if len(workers) > 1:
        one, most = workers[min(workers)], workers[max(workers)]
        gain = median(most, rps) / median(one, rps)
        lines += ["", f"Throughput {max(workers)} / {min(workers)} workers: {gain:.2f}x."]
    return [*lines, ""]


def report(
    results: dict[tuple[str, int, str], list[Window]],
    clients: list[ClientRatio],
    workers: dict[int, list[Window]],
    args: argparse.Namespace,
    load_before: str,
    load_after: str,
) -> str:
    lines = [
        "# Gateway benchmark: REST through the gateway vs gRPC direct",
        "",
        f"Command: `{args.command}`",
        f"Machine: {os.cpu_count()} CPUs, {platform.python_implementation()} "
        f"{platform.python_version()}, {platform.machine()}; load average before the run: "
        f"{load_before}, after: {load_after}. Clients, gateway and service share these CPUs.",
        "",
        "The service runs in its default layout (one frontend per core); the gateway's hop to "
        + (
            "it is the service's local socket (`--grpc-local-socket`, as scripts/serve.sh runs "
            "them; `--transport grpc` measures the gRPC hop)."
            if args.transport == "local"
            else "it is gRPC (`--transport grpc`)."
        ),
        "",
        *_clients(clients),
        *_matrix(results, args.rounds),
        *_workers(workers, args.workers_concurrency),
    ]
    return "\n".join(lines).rstrip() + "\n"


@register
class GatewayBench(Scenario):
    """REST through the gateway vs gRPC direct: real clients, minimal clients, workers."""

    name = "gateway-bench"

    @staticmethod
    def add_cli_args(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--models", nargs="+", default=["add_sub", "mlp"])
        parser.add_argument("--concurrency", nargs="+", type=int, default=[1, 32])
        parser.add_argument("--paths", nargs="+", default=list(PATHS), choices=PATHS)
        parser.add_argument("--rounds", type=int, default=3)
        parser.add_argument(
            "--duration", type=float, default=3.0, help="measured seconds per window"
        )
        parser.add_argument("--warmup", type=float, default=1.0)
        parser.add_argument(
            "--client-rounds", type=int, default=10, help="tritonclient rounds (300 requests each)"
        )
        parser.add_argument("--perf-analyzer-rounds", type=int, default=3)
        parser.add_argument(
            "--workers", type=int, default=2, help="also measure a gateway with this many workers"
        )
        parser.add_argument("--workers-concurrency", type=int, default=32)
        parser.add_argument(
            "--transport",
            choices=("local", "grpc"),
            default="local",
            help="the gateway's hop to the service: its local socket (as scripts/serve.sh runs "
            "them) or gRPC",
        )
        parser.add_argument(
            "--quick", action="store_true", help="1 round of 1 s; print, write nothing"
        )

    @staticmethod
    def run(args: argparse.Namespace) -> int:
        if args.quick:
            args.rounds, args.duration, args.warmup = 1, 1.0, 0.5
            args.client_rounds, args.perf_analyzer_rounds = 2, 1
        load_before = _loadavg()
        try:
            import uvloop
        except ImportError:
            return asyncio.run(main_async(args, load_before))
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            return runner.run(main_async(args, load_before))
