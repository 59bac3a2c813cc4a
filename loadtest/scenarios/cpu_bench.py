"""Server CPU per request: our server against a bare grpc.aio servicer, in one run.

A bare servicer (``bare-servicer``, on asyncio's loop and on uvloop, which ours uses)
and ours (and, with ``--baseline-ref``, ours as of older commits) run side by side on
loopback; h2load sends prebuilt gRPC request bodies (``h2grpc.py``). A
figure is the CPU time of the server's process tree (/proc, children included) over a
window divided by the requests the server itself counted as successful in it
(ModelStatistics). Rounds alternate the servers' order; each figure is the median over
rounds. Then the Python load generator measures p50 latency at concurrency 1.

Workloads (the issue's, on a 2-core machine):

- add_sub [1,16] FP32, no batching, concurrency 8;
- add_sub with dynamic batching (``dynamic_batching {}``), concurrency 32;
- identity (built-in backend), 1 MiB FP32 in and out, concurrency 1;
- p50 latency of add_sub at concurrency 1 (Python grpc.aio client).

    .venv/bin/python -m loadtest cpu-bench --baseline-ref main   # ~5 min; results/cpu_bench.md
    .venv/bin/python -m loadtest cpu-bench --quick --only add_sub --threads   # smoke run
    .venv/bin/python -m loadtest cpu-bench --floors --only add_sub   # + the floors under ours

Without h2load the CPU rows fall back to the Python load generator and say so.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from server_process import LoggedProcess, ServerProcess

from inference import grpc_service_pb2 as pb
from loadtest import REPO_ROOT, RESULTS
from loadtest.h2grpc import INSTALL_HINT, grpc_body, h2load, have_h2load, model_successes
from loadtest.loadgen import LoadSpec, run_load
from loadtest.metrics import thread_cpu_seconds, tree_cpu_seconds
from loadtest.processes import bare_servicer
from loadtest.report import publish, short_commit
from loadtest.repository import add_sub, batching, identity_backend
from loadtest.scenario import Scenario, register

IDENTITY_FLOATS = 262_144  # 1 MiB of FP32


@dataclass(frozen=True)
class Workload:
    key: str
    title: str
    model: str
    concurrency: int
    connections: int  # h2load -c; streams per connection (-m) make up the concurrency
    shapes: tuple[tuple[str, tuple[int, ...]], ...]

    def request(self) -> pb.ModelInferRequest:
        rng = np.random.default_rng(0)
        request = pb.ModelInferRequest(model_name=self.model)
        for name, shape in self.shapes:
            request.inputs.add(name=name, datatype="FP32", shape=shape)
            request.raw_input_contents.append(rng.standard_normal(shape).astype("<f4").tobytes())
        return request


ADD_SUB = (("INPUT0", (1, 16)), ("INPUT1", (1, 16)))
IDENTITY = (("INPUT0", (IDENTITY_FLOATS,)),)
WORKLOADS = (
    Workload("add_sub", "add_sub [1,16] FP32, no batching", "add_sub", 8, 2, ADD_SUB),
    Workload("add_sub_batch", "add_sub, dynamic batching", "add_sub_batch", 32, 4, ADD_SUB),
    Workload("identity_1m", "identity, 1 MiB FP32 in and out", "identity_1m", 1, 1, IDENTITY),
)
LATENCY = Workload("latency", "add_sub p50 latency", "add_sub", 1, 1, ADD_SUB)


def build_repository(root: Path) -> Path:
    """add_sub (the default repository's), add_sub_batch (+ dynamic_batching), identity_1m."""
    add_sub(root)
    add_sub(root, "add_sub_batch", extra=batching(None))
    one = "instance_group [ { count: 1 kind: KIND_CPU } ]\n"
    identity_backend(root, "identity_1m", str(IDENTITY_FLOATS), extra=one)
    return root


@dataclass
class Sample:
    cpu_us: float  # server CPU per successful request
    req_s: float
    answered: int  # what the client counted as answered (HTTP 2xx for h2load)
    counted: int  # what the server counted as successful
    threads: dict[str, tuple[float, float]] = field(default_factory=dict)  # µs/req user, sys


@dataclass
class Server:
    label: str
    process: LoggedProcess
    samples: dict[str, list[Sample]] = field(default_factory=dict)
    p50_ms: list[float] = field(default_factory=list)

    @property
    def url(self) -> str:
        return self.process.url


def python_load(url: str, work: Workload, seconds: float) -> int:
    """Fallback without h2load: the Python closed-loop load generator (it costs CPU too)."""
    spec = LoadSpec(url, work.model, work.concurrency, seconds, 0.0, max_requests=10**7)
    result = asyncio.run(run_load(spec, work.request()))
    return round(result.req_per_s * seconds)


def _per_thread(
    before: dict[str, tuple[float, float]], after: dict[str, tuple[float, float]], count: int
) -> dict[str, tuple[float, float]]:
    out = {}
    for name, (user, system) in after.items():
        user0, system0 = before.get(name, (0.0, 0.0))
        out[name] = ((user - user0) / count * 1e6, (system - system0) / count * 1e6)
    return out


def measure(server: Server, work: Workload, body: Path | None, seconds: float) -> Sample:
    """One window: warm-up, then CPU and counted successes around the measured run."""

    def run(length: float) -> int:
        if body is None:
            return python_load(server.url, work, length)
        streams = work.concurrency // work.connections
        return h2load(server.url, body, work.connections, streams, length)

    run(min(2.0, seconds / 2))  # warm-up: connections, caches, the model's first runs
    pid = server.process.pid
    count0, cpu0 = model_successes(server.url, work.model), tree_cpu_seconds(pid) or 0.0
    threads0, start = thread_cpu_seconds(pid), time.perf_counter()
    answered = run(seconds)
    elapsed = time.perf_counter() - start
    cpu1, threads1 = tree_cpu_seconds(pid) or 0.0, thread_cpu_seconds(pid)
    counted = model_successes(server.url, work.model) - count0
    if not counted:
        return Sample(float("nan"), 0.0, answered, 0)
    return Sample(
        (cpu1 - cpu0) / counted * 1e6,
        counted / elapsed,
        answered,
        counted,
        _per_thread(threads0, threads1, counted),
    )


def p50_latency(server: Server, seconds: float) -> float:
    spec = LoadSpec(server.url, LATENCY.model, 1, seconds, 1.0, max_requests=10**6)
    return asyncio.run(run_load(spec, LATENCY.request())).latency_ms["p50"]


@contextmanager
def baseline_tree(ref: str) -> Iterator[Path]:
    """``git archive`` of ``ref`` in a temporary folder (its server runs from there)."""
    with tempfile.TemporaryDirectory(prefix="cpu-bench-base-") as tmp:
        archive = Path(tmp) / "tree.tar"
        subprocess.run(
            ["git", "archive", "--format=tar", "-o", str(archive), ref], cwd=REPO_ROOT, check=True
        )
        tree = Path(tmp) / "tree"
        with tarfile.open(archive) as tar:
            tar.extractall(tree, filter="data")
        yield tree


# The bare servicer on uvloop plus the least of what this project's rules ask (the model
# off the loop's thread) and of what a real backend costs (ONNX Runtime): floors under ours.
FLOORS = (
    ("bare+thread", ["--uvloop", "--model-thread"]),
    ("bare+ort", ["--uvloop", "--onnxruntime"]),
    ("bare+thread+ort", ["--uvloop", "--model-thread", "--onnxruntime"]),
)


def start_servers(
    stack: ExitStack,
    repo: Path,
    baseline_refs: list[str],
    frontends: int = 0,
    floors: bool = False,
) -> list[Server]:
    """bare (asyncio: the yardstick), ours (``--frontends``: all its processes counted),
    bare on uvloop (the loop ours runs on), the floors when asked, and our server as of
    each of ``baseline_refs``."""
    servers = []
    bares: tuple[tuple[str, list[str]], ...] = (("bare", []), ("bare+uvloop", ["--uvloop"]))
    bares += FLOORS if floors else ()
    for label, extra in bares:
        servers.append(Server(label, bare_servicer(label, *extra)))
    ours = ServerProcess([repo], extra_args=["--frontends", str(frontends)])
    servers.insert(1, Server("ours" if not frontends else f"ours --frontends {frontends}", ours))
    for baseline_ref in baseline_refs:
        tree = stack.enter_context(baseline_tree(baseline_ref))
        # Its own packages first (generated protos included), this environment's libraries.
        old = ServerProcess(
            [repo], env={"PYTHONPATH": os.pathsep.join([str(tree), str(tree / "protos")])}
        )
        old.cwd = tree
        if not (tree / "service" / "supervisor.py").exists():  # older than --frontends
            at = old.args.index("--frontends")
            del old.args[at : at + 2]
        if old.local_socket and not (tree / "service" / "handlers" / "local_rpc.py").exists():
            at = old.args.index("--grpc-local-socket")  # older than the local RPC socket
            del old.args[at : at + 2]
            old.local_socket = ""
        short = short_commit(baseline_ref)
        label = baseline_ref if short == baseline_ref else f"{baseline_ref} ({short})"
        servers.append(Server(label, old))
    for server in servers:
        stack.callback(server.process.stop)
        server.process.start(timeout=90)
    return servers


def measure_all(args: argparse.Namespace) -> tuple[list[Server], list[Workload], str]:
    """Every round of every workload on every server; the client that drove them."""
    client = "h2load (nghttp2)" if have_h2load() else "Python loadgen (h2load not found)"
    if not have_h2load():
        print(
            f"cpu-bench: {INSTALL_HINT}; measuring with the Python load generator, whose "
            "CPU competes with the servers'",
            file=sys.stderr,
        )
    workloads = [w for w in WORKLOADS if not args.only or w.key in args.only]
    with ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="cpu-bench-")))
        repo = build_repository(tmp / "repo")
        bodies = {}
        for work in WORKLOADS:
            bodies[work.key] = tmp / f"{work.key}.body"
            bodies[work.key].write_bytes(grpc_body(work.request().SerializeToString()))
        servers = start_servers(stack, repo, args.baseline_ref, args.frontends, args.floors)
        for index in range(args.rounds):
            order = servers if index % 2 == 0 else servers[::-1]
            for work in workloads:
                for server in order:
                    body = bodies[work.key] if have_h2load() else None
                    sample = measure(server, work, body, args.duration)
                    server.samples.setdefault(work.key, []).append(sample)
                    print(
                        f"round {index + 1} {server.label:>12} {work.key:>14}: "
                        f"{sample.cpu_us:6.0f} µs/req {sample.req_s:7.0f} req/s",
                        file=sys.stderr,
                    )
            if args.only and "latency" not in args.only:
                continue
            for server in order:
                server.p50_ms.append(p50_latency(server, args.latency_seconds))
                print(
                    f"round {index + 1} {server.label:>12} p50 {server.p50_ms[-1]:.3f} ms",
                    file=sys.stderr,
                )
    return servers, workloads, client


def _median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def _cpu(server: Any, key: str) -> float:
    return _median([s.cpu_us for s in server.samples.get(key, [])])


def _rate(server: Any, key: str) -> float:
    return _median([s.req_s for s in server.samples.get(key, [])])


def _table(servers: Sequence[Any], workloads: Sequence[Any]) -> list[str]:
    bare, ours, *others = servers
    head = "| workload | concurrency | bare µs/req | ours µs/req | ours / bare |"
    rule = "|---|--:|--:|--:|--:|"
    for other in others:
        head += f" {other.label} µs/req |"
        rule += "--:|"
    rows = [head + " bare req/s | ours req/s |", rule + "--:|--:|"]
    for work in workloads:
        b, o = _cpu(bare, work.key), _cpu(ours, work.key)
        row = f"| {work.title} | {work.concurrency} | {b:.0f} | {o:.0f} | {o / b:.2f} |"
        row += "".join(f" {_cpu(other, work.key):.0f} |" for other in others)
        rows.append(row + f" {_rate(bare, work.key):.0f} | {_rate(ours, work.key):.0f} |")
    return rows


def _targets(servers: Sequence[Any], measured: set[str]) -> list[str]:
    """The issue's targets whose workloads this run measured (``--only`` leaves some out)."""
    bare, ours, *others = servers
    same_loop = next((o for o in others if o.label == "bare+uvloop"), None)
    unbatched, batched = _cpu(ours, "add_sub"), _cpu(ours, "add_sub_batch")
    ratio_a = unbatched / _cpu(bare, "add_sub")
    ratio_i = _cpu(ours, "identity_1m") / _cpu(bare, "identity_1m")
    # (target, measured, wanted, met, the workloads it needs)
    rows: list[tuple[str, str, str, bool, set[str]]] = [
        ("add_sub c=8: ours / bare", f"{ratio_a:.2f}", "≤ 1.15", ratio_a <= 1.15, {"add_sub"}),
        (
            "add_sub: batching c=32 vs unbatched c=8 (ours, µs/req)",
            f"{batched:.0f} vs {unbatched:.0f}",
            "batched ≤ unbatched",
            batched <= unbatched,
            {"add_sub", "add_sub_batch"},
        ),
        (
            "identity 1 MiB c=1: ours / bare",
            f"{ratio_i:.2f}",
            "≤ 1.30",
            ratio_i <= 1.30,
            {"identity_1m"},
        ),
    ]
    if same_loop is not None:  # the same yardstick on the loop ours runs on
        ratio_u = unbatched / _cpu(same_loop, "add_sub")
        ratio_ui = _cpu(ours, "identity_1m") / _cpu(same_loop, "identity_1m")
        rows.append(
            (
                "add_sub c=8: ours / bare+uvloop",
                f"{ratio_u:.2f}",
                "≤ 1.15",
                ratio_u <= 1.15,
                {"add_sub"},
            )
        )
        rows.append(
            (
                "identity 1 MiB c=1: ours / bare+uvloop",
                f"{ratio_ui:.2f}",
                "≤ 1.30",
                ratio_ui <= 1.30,
                {"identity_1m"},
            )
        )
    for other in others:
        if other.label.startswith("bare") or not (ours.p50_ms and other.p50_ms):
            continue
        p50_ours, p50_other = _median(ours.p50_ms), _median(other.p50_ms)
        rows.append(
            (
                f"add_sub p50 at c=1: ours vs {other.label} (ms)",
                f"{p50_ours:.3f} vs {p50_other:.3f}",
                f"≤ {other.label} + 0.1 ms",
                p50_ours <= p50_other + 0.1,
                set(),
            )
        )
    lines = ["| target | measured | wanted | met |", "|---|--:|---|:-:|"]
    lines += [
        f"| {n} | {v} | {w} | {'yes' if ok else 'NO'} |"
        for n, v, w, ok, needs in rows
        if needs <= measured
    ]
    return lines


FLOOR_ADDS = {
    "bare+thread": "the model in one thread fed by a queue, answers by call_soon_threadsafe",
    "bare+ort": "add_sub by an ONNX Runtime session (on the loop's thread)",
    "bare+thread+ort": "both: ONNX Runtime in one thread fed by a queue",
}


def _floors(servers: Sequence[Any]) -> list[str]:
    """What the least rule-abiding server costs, against the 1.15 x bare target."""
    bare, ours, *others = servers
    floors = [o for o in others if o.label in FLOOR_ADDS]
    if not floors:
        return []
    base, mine = _cpu(bare, "add_sub"), _cpu(ours, "add_sub")
    lines = [
        "## Floors under ours (add_sub c=8)",
        "",
        "The bare servicer on uvloop with only what this project's rules and backend add: "
        "a model may not run on the loop's thread, and add_sub is an ONNX model. Nothing "
        "else of ours (no configs, validation, schedulers, statistics).",
        "",
        "| server | what it adds to bare+uvloop | µs/req | / bare | ours / it |",
        "|---|---|--:|--:|--:|",
    ]
    for floor in floors:
        cost = _cpu(floor, "add_sub")
        lines.append(
            f"| {floor.label} | {FLOOR_ADDS[floor.label]} | {cost:.0f} | {cost / base:.2f} | "
            f"{mine / cost:.2f} |"
        )
    return [*lines, "", f"The target, 1.15 x bare, is {1.15 * base:.0f} µs/req.", ""]


def _threads(servers: Sequence[Any], workloads: Sequence[Any]) -> list[str]:
    """Per thread, µs of CPU per request (user + system), medians over rounds."""
    lines = [
        "| server | workload | thread | user µs/req | system µs/req |",
        "|---|---|---|--:|--:|",
    ]
    for server in servers:
        for work in workloads:
            samples = server.samples.get(work.key, [])
            names = sorted({n for s in samples for n in s.threads})
            for name in names:
                user = _median([s.threads[name][0] for s in samples if name in s.threads])
                system = _median([s.threads[name][1] for s in samples if name in s.threads])
                if user + system >= 1:
                    lines.append(
                        f"| {server.label} | {work.key} | {name} | {user:.0f} | {system:.0f} |"
                    )
    return lines


def render(
    servers: Sequence[Any],
    workloads: Sequence[Any],
    args: argparse.Namespace,
    client: str,
    command: str,
    commit: str,
) -> str:
    latency = []
    if any(s.p50_ms for s in servers):  # measured unless --only left it out
        latency = [
            "## Latency (Python grpc.aio client, closed loop, concurrency 1)",
            "",
            "| server | add_sub p50 at c=1 (ms) |",
            "|---|--:|",
            *(f"| {s.label} | {_median(s.p50_ms):.3f} |" for s in servers),
            "",
        ]
    rounds = [
        f"- {s.label}, {key}: " + ", ".join(f"{x.cpu_us:.0f}" for x in xs)
        for s in servers
        for key, xs in s.samples.items()
    ]
    unanswered = [
        f"- {s.label}, {key}: the client got {sum(x.answered for x in xs)} answers, the "
        f"server counted {sum(x.counted for x in xs)} successes"
        for s in servers
        for key, xs in s.samples.items()
        if sum(x.answered for x in xs) > sum(x.counted for x in xs)
    ]
    load = os.getloadavg()[0]
    lines = [
        "# Server CPU per request: ours vs a bare grpc.aio servicer",
        "",
        f"Command: `{command}`  ",
        f"Commit {commit}; {os.cpu_count()} CPUs; load average {load:.2f} at the end (other "
        f"work on the machine); client: {client}; {args.rounds} round(s) of "
        f"{args.duration:g} s per workload and server, order alternating; medians over rounds.",
        "",
        "Server CPU = user + system time of the server's process tree (/proc) over the "
        "window, divided by the successes the server itself counted (ModelStatistics). "
        "`bare` is `python -m loadtest bare-servicer`: grpc.aio, the generated stubs and numpy, "
        "nothing else, on asyncio's loop (the issue's yardstick); `bare+uvloop` is the same "
        "on uvloop, the loop our server runs on.",
        "",
        *_table(servers, workloads),
        "",
        "## Targets",
        "",
        *_targets(servers, {w.key for w in workloads}),
        "",
        *_floors(servers),
        *latency,
        "## Every round (µs/req)",
        "",
        *rounds,
    ]
    if unanswered:
        lines += ["", "Answers the server did not count as successes:", *unanswered]
    if args.threads:
        lines += ["", "## CPU per thread", "", *_threads(servers, workloads)]
    return "\n".join(lines) + "\n"


@register
class CpuBench(Scenario):
    """Server CPU per request: ours against a bare grpc.aio servicer (h2load)."""

    name = "cpu-bench"

    @staticmethod
    def add_cli_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("--duration", type=float, default=8.0, help="measured seconds per window")
        p.add_argument("--rounds", type=int, default=3)
        p.add_argument("--latency-seconds", type=float, default=6.0)
        p.add_argument(
            "--baseline-ref",
            action="append",
            default=[],
            help="also measure our server as of this git ref (repeatable)",
        )
        p.add_argument(
            "--frontends", type=int, default=0, help="our server's --frontends (0: one process)"
        )
        p.add_argument(
            "--floors",
            action="store_true",
            help="also the bare servicer with its model in a thread and/or on ONNX Runtime",
        )
        p.add_argument("--only", nargs="*", default=[], help="workload keys to run (default: all)")
        p.add_argument("--threads", action="store_true", help="report CPU per thread too")
        p.add_argument("--quick", action="store_true", help="short run, prints only")
        p.add_argument(
            "--out",
            type=Path,
            default=None,
            help="report file (default results/cpu_bench.md, written only for a full run)",
        )

    @staticmethod
    def run(args: argparse.Namespace) -> int:
        if args.quick:
            args.duration, args.rounds, args.latency_seconds = 3.0, 1, 3.0
        servers, workloads, client = measure_all(args)
        text = render(servers, workloads, args, client, args.command, short_commit())
        out = args.out
        if out is None and not args.quick and not args.only:
            out = RESULTS / "cpu_bench.md"
        publish(text, out)
        return 0
