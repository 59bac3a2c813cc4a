"""Closed-loop gRPC load generator for ModelInfer (grpc.aio and the generated stub).

Closed loop: C workers each send their next request only when the previous one returned, so
the offered load follows the server and latency is never inflated by a client-side backlog.
Requests completing in [warm-up end, warm-up end + duration] are counted; a hard cap on the
requests sent bounds every run whatever the server does. With ``--processes N`` the workers
are split over N spawned processes, each with its own channel, so that one client interpreter
is not the bottleneck. ModelStatistics is read at both ends of the window to get the mean
executed batch size; a server without the statistics extension gives "n/a".

    .venv/bin/python -m loadtest loadgen --url 127.0.0.1:8001 --model NAME --concurrency 8
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import time
from typing import Any

import grpc

from inference import grpc_service_pb2 as pb
from inference import grpc_service_pb2_grpc as pb_grpc
from loadtest.loadresult import (
    ClientReport,
    LoadResult,
    LoadSpec,
    Observed,
    Timeline,
    merge_reports,
)
from loadtest.metrics import machine_busy_seconds, tree_cpu_seconds
from loadtest.payloads import batch_of, infer_request, specs_from_metadata, synthesize

__all__ = ["CHANNEL_OPTIONS", "LoadResult", "LoadSpec", "build_request", "run_load"]

CHANNEL_OPTIONS = [("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1)]
READY_TIMEOUT_S = 60.0  # spawned clients must connect within this


def _channel(url: str) -> grpc.aio.Channel:
    return grpc.aio.insecure_channel(url, options=CHANNEL_OPTIONS)


async def build_request(
    stub: pb_grpc.GRPCInferenceServiceStub, spec: LoadSpec
) -> tuple[pb.ModelInferRequest, int]:
    """Request synthesized from the served signature, and the inferences it carries."""
    meta = await stub.ModelMetadata(pb.ModelMetadataRequest(name=spec.model), timeout=10)
    specs = specs_from_metadata(meta)
    tensors = synthesize(specs, batch=spec.batch, dynamic_dim=spec.dynamic_dim)
    return infer_request(spec.model, tensors), batch_of(specs, spec.batch)


async def _sleep_until(wall: float) -> None:
    await asyncio.sleep(max(0.0, wall - time.time()))


async def _drive(
    stub: pb_grpc.GRPCInferenceServiceStub,
    request: pb.ModelInferRequest,
    concurrency: int,
    cap: int,
    timeline: Timeline,
    rpc_timeout: float,
) -> ClientReport:
    """Run ``concurrency`` closed-loop workers until the window ends or ``cap`` is sent."""
    report = ClientReport()
    offset = time.perf_counter() - time.time()  # wall -> perf_counter
    ws, we = timeline.window_start + offset, timeline.window_end + offset

    async def worker() -> None:
        while (t0 := time.perf_counter()) < we:
            if report.sent >= cap:
                report.capped = True
                return
            report.sent += 1
            code = ""
            try:
                await stub.ModelInfer(request, timeout=rpc_timeout)
            except grpc.aio.AioRpcError as exc:
                code = exc.code().name
                report.first_error = report.first_error or f"{code}: {exc.details()}"
            t1 = time.perf_counter()
            if ws <= t1 <= we:
                if code:
                    report.errors[code] += 1
                else:
                    report.latencies_ms.append((t1 - t0) * 1e3)
                report.last_done = max(report.last_done, t1 - offset)

    async def cpu_sampler() -> None:
        await _sleep_until(timeline.window_start)
        before = time.process_time()
        await _sleep_until(timeline.window_end)
        report.cpu_s = time.process_time() - before

    await asyncio.gather(cpu_sampler(), *(worker() for _ in range(concurrency)))
    return report


async def _read_counts(stub: pb_grpc.GRPCInferenceServiceStub, model: str) -> tuple[int, int, int]:
    """(inference_count, execution_count, compute_infer ns over all executions) summed
    over versions; raises AioRpcError."""
    reply = await stub.ModelStatistics(pb.ModelStatisticsRequest(name=model), timeout=10)
    stats = list(reply.model_stats)
    compute = sum(b.compute_infer.ns for s in stats for b in s.batch_stats)
    return (
        sum(s.inference_count for s in stats),
        sum(s.execution_count for s in stats),
        compute,
    )


async def _observe(
    stub: pb_grpc.GRPCInferenceServiceStub, spec: LoadSpec, timeline: Timeline
) -> Observed:
    """What the server and the machine did over the window (stats and CPU use)."""
    counts: list[tuple[int, int, int]] = []
    server: list[float | None] = []
    machine: list[float | None] = []
    note = ""
    for instant in (timeline.window_start, timeline.window_end):
        await _sleep_until(instant)
        machine.append(machine_busy_seconds())
        server.append(tree_cpu_seconds(spec.server_pid) if spec.server_pid else None)
        if note:
            continue
        try:
            counts.append(await _read_counts(stub, spec.model))
        except grpc.aio.AioRpcError as exc:
            if exc.code() != grpc.StatusCode.UNIMPLEMENTED:
                raise
            note = "n/a (ModelStatistics: UNIMPLEMENTED)"
    span = timeline.window_end - timeline.window_start

    def rate(pair: list[float | None]) -> float | None:
        a, b = pair
        return None if a is None or b is None else (b - a) / span

    mean_batch = mean_exec_ms = None
    if not note:
        inferences, executions, compute_ns = (
            b - a for a, b in zip(counts[0], counts[1], strict=True)
        )
        if executions > 0:
            mean_batch, note = inferences / executions, "ModelStatistics delta"
            mean_exec_ms = compute_ns / executions / 1e6
        else:
            note = "n/a (no executions counted in the window)"
    return Observed(mean_batch, note, rate(server), rate(machine), mean_exec_ms)


def _child(
    spec: LoadSpec, request_bytes: bytes, concurrency: int, cap: int, outbox: Any, go: Any
) -> None:
    """Spawned client process: connect, post None (ready), wait for the timeline, drive.

    Posts its ClientReport when done, or a str describing why it failed, so that the parent
    never waits on a dead child until its timeout.
    """

    async def main() -> ClientReport:
        async with _channel(spec.url) as channel:
            await asyncio.wait_for(channel.channel_ready(), READY_TIMEOUT_S)
            outbox.put(None)
            timeline: Timeline = await asyncio.to_thread(go.get, True, READY_TIMEOUT_S)
            request = pb.ModelInferRequest.FromString(request_bytes)
            stub = pb_grpc.GRPCInferenceServiceStub(channel)
            return await _drive(stub, request, concurrency, cap, timeline, spec.timeout)

    try:
        outbox.put(asyncio.run(main()))
    except Exception as exc:  # reported to the parent, which raises
        outbox.put(f"client process failed: {exc!r}")


async def _receive(outbox: Any, wait_s: float) -> Any:
    item = await asyncio.to_thread(outbox.get, True, wait_s)
    if isinstance(item, str):
        raise RuntimeError(item)
    return item


def _split(total: int, parts: int) -> list[int]:
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


async def _run_processes(
    spec: LoadSpec, request: pb.ModelInferRequest, stub: pb_grpc.GRPCInferenceServiceStub
) -> tuple[list[ClientReport], Timeline, Observed]:
    ctx = mp.get_context("spawn")  # fork would copy the parent's gRPC state
    outbox, go = ctx.Queue(), ctx.Queue()
    shares = [c for c in _split(spec.concurrency, spec.processes) if c > 0]
    caps = _split(spec.max_requests, len(shares))
    procs = [
        ctx.Process(
            target=_child,
            args=(spec, request.SerializeToString(), c, cap, outbox, go),
            daemon=True,
        )
        for c, cap in zip(shares, caps, strict=True)
    ]
    for proc in procs:
        proc.start()
    try:
        for _ in procs:
            await _receive(outbox, READY_TIMEOUT_S)
        start = time.time() + 0.05
        timeline = Timeline(start + spec.warmup, start + spec.warmup + spec.duration)
        for _ in procs:
            go.put(timeline)
        observed = await _observe(stub, spec, timeline)
        limit = spec.duration + spec.warmup + spec.timeout + READY_TIMEOUT_S
        reports = [await _receive(outbox, limit) for _ in procs]
        for proc in procs:
            proc.join(10)
        return reports, timeline, observed
    finally:
        for proc in procs:
            if proc.is_alive():
                proc.terminate()
                proc.join(5)


async def run_load(
    spec: LoadSpec, request: pb.ModelInferRequest | None = None, inferences: int = 1
) -> LoadResult:
    """Run one closed-loop measurement; the request is synthesized from metadata if None."""
    if spec.concurrency < 1 or spec.processes < 1 or spec.max_requests < 1:
        raise ValueError("concurrency, processes and max_requests must be >= 1")
    async with _channel(spec.url) as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        if request is None:
            request, inferences = await build_request(stub, spec)
        await stub.ModelInfer(request, timeout=spec.timeout)  # fail fast on a bad setup
        if spec.processes == 1:
            start = time.time()
            timeline = Timeline(start + spec.warmup, start + spec.warmup + spec.duration)
            report, observed = await asyncio.gather(
                _drive(stub, request, spec.concurrency, spec.max_requests, timeline, spec.timeout),
                _observe(stub, spec, timeline),
            )
            reports = [report]
        else:
            reports, timeline, observed = await _run_processes(spec, request, stub)
    return merge_reports(spec, reports, timeline, observed, inferences)
