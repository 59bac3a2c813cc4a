"""The one closed-loop load generator of every scenario.

C workers each send their next request when the previous one returned, so the offered load
follows the server and no client-side queue inflates latency. Completions inside [warm-up
end, warm-up end + duration] count; a cap on requests sent bounds every run. ``drive`` runs
that loop over any awaitable calls (gRPC, REST, the engine's channel) and samples what the
caller asks at both ends of the window; ``run_load`` drives ModelInfer from one or several
spawned client processes and reads ModelStatistics and /proc around the window.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing as mp
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, NamedTuple, TypeVar

import grpc
import numpy as np

from inference import grpc_service_pb2 as pb
from inference import grpc_service_pb2_grpc as pb_grpc
from loadtest.metrics import machine_busy_seconds, summarize_latencies, tree_cpu_seconds
from loadtest.report import fmt

CHANNEL_OPTIONS = [("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1)]
READY_TIMEOUT_S = 60.0  # spawned clients must connect within this
Call = Callable[[], Awaitable[object]]
T = TypeVar("T")
_INTS = [f"{u}INT{bits}" for u in ("U", "") for bits in (8, 16, 32, 64)]
_DTYPES = {  # KServe v2 datatypes with a plain numpy dtype (BYTES and BF16 have none)
    name: np.dtype(name.lower().replace("fp", "float")).newbyteorder("<")
    for name in ("BOOL", "FP16", "FP32", "FP64", *_INTS)
}
DATATYPE = {dtype: name for name, dtype in _DTYPES.items()}


def synthesize(
    specs: Iterable[pb.ModelMetadataResponse.TensorMetadata], batch: int = 1, dynamic_dim: int = 16
) -> dict[str, np.ndarray[Any, Any]]:
    """Seeded random tensors for the inputs ModelMetadata reports: the first -1 dimension is
    Triton's batch dimension and becomes ``batch``, later ones ``dynamic_dim``."""
    rng = np.random.default_rng(0)
    out = {}
    for spec in specs:
        if spec.datatype not in _DTYPES:
            raise ValueError(f"input '{spec.name}': datatype {spec.datatype} is not supported")
        dims = [d if d >= 0 else dynamic_dim for d in spec.shape]
        if -1 in spec.shape:
            dims[list(spec.shape).index(-1)] = batch
        dtype = _DTYPES[spec.datatype]
        if dtype.kind == "f":
            out[spec.name] = rng.standard_normal(dims).astype(dtype)
        else:
            out[spec.name] = rng.integers(0, 2 if dtype.kind == "b" else 10, dims).astype(dtype)
    return out


def infer_request(model: str, tensors: Mapping[str, np.ndarray[Any, Any]]) -> pb.ModelInferRequest:
    """A ModelInferRequest carrying ``tensors`` in ``raw_input_contents``."""
    request = pb.ModelInferRequest(model_name=model)
    for name, array in tensors.items():
        request.inputs.add(name=name, datatype=DATATYPE[array.dtype], shape=array.shape)
        request.raw_input_contents.append(array.tobytes())
    return request


@dataclass(frozen=True)
class LoadSpec:
    """What ``run_load`` runs; every field is an option of the ``loadgen`` scenario."""

    url: str
    model: str
    concurrency: int = 8
    duration: float = 10.0
    warmup: float = 2.0
    processes: int = 1
    max_requests: int = 100_000
    timeout: float = 30.0
    batch: int = 1
    dynamic_dim: int = 16
    server_pid: int | None = None


class Timeline(NamedTuple):
    """Wall-clock (time.time) instants shared by all client processes."""

    window_start: float
    window_end: float


@dataclass
class ClientReport:
    """One client process's view of the measured window (picklable)."""

    latencies_ms: list[float] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)
    first_error: str = ""
    sent: int = 0
    capped: bool = False
    last_done: float = 0.0  # wall time of the last completion inside the window
    cpu_s: float = 0.0


@dataclass(frozen=True)
class LoadResult:
    """Throughput and latency of one ``run_load``."""

    spec: LoadSpec
    window_s: float
    requests: int
    inferences_per_request: int
    errors: int
    error_codes: dict[str, int]
    first_error: str
    latency_ms: dict[str, float]
    mean_exec_batch: float | None
    stats_note: str
    client_cpu_cores: float
    server_cpu_cores: float | None
    machine_cpu_cores: float | None
    sent: int
    capped: bool
    mean_exec_ms: float | None = None  # the model's compute per execution, in the server

    @property
    def req_per_s(self) -> float:
        return self.requests / self.window_s if self.window_s > 0 else 0.0

    @property
    def infer_per_s(self) -> float:
        return self.req_per_s * self.inferences_per_request

    @property
    def other_cpu_cores(self) -> float | None:
        """Cores used by other processes on the machine: noise in the measurement."""
        if self.machine_cpu_cores is None or self.server_cpu_cores is None:
            return None
        return max(0.0, self.machine_cpu_cores - self.server_cpu_cores - self.client_cpu_cores)

    def to_dict(self) -> dict[str, Any]:
        derived = {"req_per_s": self.req_per_s, "infer_per_s": self.infer_per_s}
        return {**asdict(self), **derived, "other_cpu_cores": self.other_cpu_cores}

    def summary(self) -> str:
        lat, batch = self.latency_ms, fmt(self.mean_exec_batch)
        return (
            f"{self.spec.model} c={self.spec.concurrency}: {self.req_per_s:.1f} req/s, "
            f"{self.infer_per_s:.1f} infer/s, p50/p90/p99 {lat['p50']:.2f}/{lat['p90']:.2f}/"
            f"{lat['p99']:.2f} ms, errors {self.errors}, mean exec batch {batch} "
            f"({fmt(self.mean_exec_ms)} ms each), cpu client/server/others "
            f"{self.client_cpu_cores:.2f}/{fmt(self.server_cpu_cores)}/"
            f"{fmt(self.other_cpu_cores)} cores" + (" [CAPPED]" if self.capped else "")
        )


async def _sleep_until(wall: float) -> None:
    await asyncio.sleep(max(0.0, wall - time.time()))


async def _sampled(
    load: Awaitable[T], timeline: Timeline, sample: Callable[[], Any]
) -> tuple[T, list[Any]]:
    """``load``'s result, and ``sample()`` at the window's start and at its end, or when a
    capped load ended before it (no samples when it ended before the window began)."""
    samples: list[Any] = []

    async def sampler() -> None:
        await _sleep_until(timeline.window_start)
        samples.append(sample())
        try:
            await _sleep_until(timeline.window_end)
        finally:
            samples.append(sample())

    task = asyncio.ensure_future(sampler())
    result = await load
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    return result, samples


async def closed_loop(calls: Sequence[Call], timeline: Timeline, cap: int) -> ClientReport:
    """One worker per call until the window ends or ``cap`` requests were sent. A call that
    raises counts as an error, by gRPC code or else by exception type."""
    report = ClientReport()
    offset = time.perf_counter() - time.time()  # wall -> perf_counter
    ws, we = timeline.window_start + offset, timeline.window_end + offset

    async def worker(call: Call) -> None:
        while (t0 := time.perf_counter()) < we:
            if report.sent >= cap:
                report.capped = True
                return
            report.sent += 1
            code = ""
            try:
                await call()
            except grpc.aio.AioRpcError as exc:
                code, detail = exc.code().name, exc.details()
            except Exception as exc:  # a REST or engine call
                code, detail = type(exc).__name__, str(exc)
            if code:
                report.first_error = report.first_error or f"{code}: {detail}"
            t1 = time.perf_counter()
            if ws <= t1 <= we:
                if code:
                    report.errors[code] += 1
                else:
                    report.latencies_ms.append((t1 - t0) * 1e3)
                report.last_done = max(report.last_done, t1 - offset)

    load = asyncio.gather(*(worker(call) for call in calls))
    _, cpu = await _sampled(load, timeline, time.process_time)
    report.cpu_s = cpu[1] - cpu[0] if len(cpu) == 2 else 0.0
    return report


@dataclass(frozen=True)
class Window:
    """One window of ``drive``: the client's report, its length, and how much each value
    ``sample`` returns changed over it (a process's CPU seconds, say)."""

    report: ClientReport
    seconds: float
    deltas: tuple[float, ...]

    @property
    def requests(self) -> int:
        return len(self.report.latencies_ms)


async def drive(
    calls: Sequence[Call],
    warmup: float,
    duration: float,
    cap: int = 200_000,
    sample: Callable[[], tuple[float, ...]] = tuple,
) -> Window:
    """``calls`` closed-loop for ``warmup`` + ``duration`` seconds, ``sample`` read at both
    ends of the measured window. Raises when a call failed: such a window measures errors."""
    start = time.time()
    timeline = Timeline(start + warmup, start + warmup + duration)
    report, samples = await _sampled(closed_loop(calls, timeline, cap), timeline, sample)
    if report.errors:
        raise RuntimeError(f"{report.errors.total()} calls failed; first: {report.first_error}")
    seconds = report.last_done - timeline.window_start if report.capped else duration
    deltas = tuple(b - a for a, b in zip(*samples, strict=True)) if len(samples) == 2 else ()
    return Window(report, seconds, deltas)


async def _statistics(stub: pb_grpc.GRPCInferenceServiceStub, model: str) -> tuple[int, ...]:
    """(inference_count, execution_count, compute_infer ns) over all versions."""
    reply = await stub.ModelStatistics(pb.ModelStatisticsRequest(name=model), timeout=10)
    stats = list(reply.model_stats)
    compute = sum(b.compute_infer.ns for s in stats for b in s.batch_stats)
    return sum(s.inference_count for s in stats), sum(s.execution_count for s in stats), compute


async def _observe(
    stub: pb_grpc.GRPCInferenceServiceStub, spec: LoadSpec, timeline: Timeline
) -> dict[str, Any]:
    """What the server and the machine did over the window (statistics and CPU): the
    LoadResult fields of that name, None where unknown."""
    counts, server, machine, note = [], [], [], ""
    for instant in timeline:
        await _sleep_until(instant)
        machine.append(machine_busy_seconds())
        server.append(tree_cpu_seconds(spec.server_pid) if spec.server_pid else None)
        if note:
            continue
        try:
            counts.append(await _statistics(stub, spec.model))
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
        inferences, executions, compute_ns = (b - a for a, b in zip(*counts, strict=True))
        note = "n/a (no executions counted in the window)"
        if executions > 0:
            mean_batch, note = inferences / executions, "ModelStatistics delta"
            mean_exec_ms = compute_ns / executions / 1e6
    return {
        "mean_exec_batch": mean_batch,
        "mean_exec_ms": mean_exec_ms,
        "stats_note": note,
        "server_cpu_cores": rate(server),
        "machine_cpu_cores": rate(machine),
    }


def _child(
    spec: LoadSpec, request: bytes, concurrency: int, cap: int, outbox: Any, go: Any
) -> None:
    """Spawned client process: connect, post None (ready), wait for the timeline, drive.
    Posts its ClientReport, or a str saying why it failed (the parent never waits on a
    dead child until its timeout)."""

    async def main() -> ClientReport:
        async with grpc.aio.insecure_channel(spec.url, options=CHANNEL_OPTIONS) as channel:
            await asyncio.wait_for(channel.channel_ready(), READY_TIMEOUT_S)
            outbox.put(None)
            timeline: Timeline = await asyncio.to_thread(go.get, True, READY_TIMEOUT_S)
            stub = pb_grpc.GRPCInferenceServiceStub(channel)
            message = pb.ModelInferRequest.FromString(request)
            calls = [lambda: stub.ModelInfer(message, timeout=spec.timeout)] * concurrency
            return await closed_loop(calls, timeline, cap)

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
) -> tuple[list[ClientReport], Timeline, dict[str, Any]]:
    ctx = mp.get_context("spawn")  # fork would copy the parent's gRPC state
    outbox, go = ctx.Queue(), ctx.Queue()
    shares = [c for c in _split(spec.concurrency, spec.processes) if c > 0]
    body = request.SerializeToString()
    procs = [
        ctx.Process(target=_child, args=(spec, body, c, cap, outbox, go), daemon=True)
        for c, cap in zip(shares, _split(spec.max_requests, len(shares)), strict=True)
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


async def run_load(spec: LoadSpec, request: pb.ModelInferRequest | None = None) -> LoadResult:
    """One closed-loop ModelInfer measurement; the request is synthesized from
    ModelMetadata when None (a given request counts as one inference)."""
    if spec.concurrency < 1 or spec.processes < 1 or spec.max_requests < 1:
        raise ValueError("concurrency, processes and max_requests must be >= 1")
    async with grpc.aio.insecure_channel(spec.url, options=CHANNEL_OPTIONS) as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        inferences = 1
        if request is None:
            meta = await stub.ModelMetadata(pb.ModelMetadataRequest(name=spec.model), timeout=10)
            tensors = synthesize(meta.inputs, spec.batch, spec.dynamic_dim)
            request = infer_request(spec.model, tensors)
            inferences = spec.batch if any(-1 in t.shape for t in meta.inputs) else 1
        await stub.ModelInfer(request, timeout=spec.timeout)  # fail fast on a bad setup
        if spec.processes == 1:
            start = time.time()
            timeline = Timeline(start + spec.warmup, start + spec.warmup + spec.duration)
            calls = [lambda: stub.ModelInfer(request, timeout=spec.timeout)] * spec.concurrency
            report, observed = await asyncio.gather(
                closed_loop(calls, timeline, spec.max_requests), _observe(stub, spec, timeline)
            )
            reports = [report]
        else:
            reports, timeline, observed = await _run_processes(spec, request, stub)
    latencies = [x for r in reports for x in r.latencies_ms]
    errors: Counter[str] = sum((r.errors for r in reports), Counter())
    planned = window = timeline.window_end - timeline.window_start
    capped = any(r.capped for r in reports)
    if capped:  # the window really ended when the last counted request came back
        window = max(r.last_done for r in reports) - timeline.window_start
    return LoadResult(
        spec=spec,
        window_s=max(window, 0.0),
        requests=len(latencies),
        inferences_per_request=inferences,
        errors=errors.total(),
        error_codes=dict(errors),
        first_error=next((r.first_error for r in reports if r.first_error), ""),
        latency_ms=summarize_latencies(latencies),
        client_cpu_cores=sum(r.cpu_s for r in reports) / planned,
        **observed,
        sent=sum(r.sent for r in reports),
        capped=capped,
    )
