"""Server CPU per request: our server against a bare grpc.aio servicer, in one run.

The bare servicer (asyncio's loop and uvloop), ours, and ours as of each ``--baseline-ref``
side by side on loopback under h2load (the Python load generator without it, said so):
the server tree's CPU over a window / the successes it counted; rounds alternate the
servers; then p50 at concurrency 1. loadtest/README.md, "Server CPU per request".

    .venv/bin/python -m loadtest cpu-bench --baseline-ref main   # ~5 min; results/cpu_bench.md
    .venv/bin/python -m loadtest cpu-bench --quick --only add_sub --threads   # smoke run
    .venv/bin/python -m loadtest cpu-bench --floors --only add_sub   # + the floors under ours
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
from server_process import LoggedProcess, ServerProcess

from inference import grpc_service_pb2 as pb
from loadtest import REPO_ROOT, RESULTS
from loadtest.h2grpc import INSTALL_HINT, answered, grpc_body, h2load, have_h2load, model_successes
from loadtest.loadgen import LoadSpec, infer_request, run_load
from loadtest.metrics import thread_cpu_seconds, tree_cpu_seconds
from loadtest.processes import bare_servicer
from loadtest.report import median, publish, short_commit, table
from loadtest.repository import add_sub, batching, identity_backend
from loadtest.scenario import Scenario, register, window_args

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
        tensors = {n: rng.standard_normal(shape).astype("<f4") for n, shape in self.shapes}
        return infer_request(self.model, tensors)


ADD_SUB = (("INPUT0", (1, 16)), ("INPUT1", (1, 16)))
WORKLOADS = (
    Workload("add_sub", "add_sub [1,16] FP32, no batching", "add_sub", 8, 2, ADD_SUB),
    Workload("add_sub_batch", "add_sub, dynamic batching", "add_sub_batch", 32, 4, ADD_SUB),
    Workload(
        "identity_1m", "identity, 1 MiB FP32 in and out", "identity_1m", 1, 1,
        (("INPUT0", (IDENTITY_FLOATS,)),),
    ),
)  # fmt: skip
LATENCY = Workload("latency", "add_sub p50 latency", "add_sub", 1, 1, ADD_SUB)
# The bare servicer on uvloop plus the least of what this project's rules ask (the model
# off the loop's thread) and of what a real backend costs (ONNX Runtime): floors under ours.
FLOORS = {
    "bare+thread": (
        ["--model-thread"],
        "the model in one thread fed by a queue, answers by call_soon_threadsafe",
    ),
    "bare+ort": (["--onnxruntime"], "add_sub by an ONNX Runtime session (on the loop's thread)"),
    "bare+thread+ort": (
        ["--model-thread", "--onnxruntime"],
        "both: ONNX Runtime in one thread fed by a queue",
    ),
}


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


def measure(server: Server, work: Workload, body: Path | None, seconds: float) -> Sample:
    """One window: warm-up, then CPU and counted successes around the measured run."""

    def run(length: float) -> int:
        if body is None:  # the Python load generator: its CPU competes with the server's
            spec = LoadSpec(server.process.url, work.model, work.concurrency, length, 0.0)
            result = asyncio.run(run_load(replace(spec, max_requests=10**7), work.request()))
            return round(result.req_per_s * length)
        streams = work.concurrency // work.connections
        return answered(h2load(server.process.url, body, work.connections, streams, length))

    run(min(2.0, seconds / 2))  # warm-up: connections, caches, the model's first runs
    pid, url = server.process.pid, server.process.url
    count0, cpu0 = model_successes(url, work.model), tree_cpu_seconds(pid) or 0.0
    threads0, start = thread_cpu_seconds(pid), time.perf_counter()
    client_count = run(seconds)
    elapsed = time.perf_counter() - start
    cpu1, threads1 = tree_cpu_seconds(pid) or 0.0, thread_cpu_seconds(pid)
    counted = model_successes(url, work.model) - count0
    if not counted:
        return Sample(float("nan"), 0.0, client_count, 0)

    def per_request(name: str, now: tuple[float, float]) -> tuple[float, float]:
        user, system = threads0.get(name, (0.0, 0.0))
        return (now[0] - user) / counted * 1e6, (now[1] - system) / counted * 1e6

    per_thread = {name: per_request(name, now) for name, now in threads1.items()}
    return Sample(
        (cpu1 - cpu0) / counted * 1e6, counted / elapsed, client_count, counted, per_thread
    )


@contextmanager
def baseline_tree(ref: str) -> Iterator[Path]:
    """``git archive`` of ``ref`` in a temporary folder (its server runs from there)."""
    with tempfile.TemporaryDirectory(prefix="cpu-bench-base-") as tmp:
        archive, tree = Path(tmp) / "tree.tar", Path(tmp) / "tree"
        git = ["git", "archive", "--format=tar", "-o", str(archive), ref]
        subprocess.run(git, cwd=REPO_ROOT, check=True)
        with tarfile.open(archive) as tar:
            tar.extractall(tree, filter="data")
        yield tree


def start_servers(stack: ExitStack, repo: Path, args: argparse.Namespace) -> list[Server]:
    """bare (asyncio: the yardstick), ours (``--frontends``: all its processes counted),
    bare on uvloop, the floors when asked, and ours as of each ``--baseline-ref``."""
    bares = {"bare": [], "bare+uvloop": ["--uvloop"]}
    if args.floors:
        bares.update({label: ["--uvloop", *flags] for label, (flags, _) in FLOORS.items()})
    servers = [Server(label, bare_servicer(label, *flags)) for label, flags in bares.items()]
    ours = ServerProcess([repo], extra_args=["--frontends", str(args.frontends)])
    servers.insert(
        1, Server(f"ours{f' --frontends {args.frontends}' * bool(args.frontends)}", ours)
    )
    for ref in args.baseline_ref:
        tree = stack.enter_context(baseline_tree(ref))
        # Its own packages first (generated protos included), this environment's libraries.
        old = ServerProcess([repo], env={"PYTHONPATH": f"{tree}{os.pathsep}{tree / 'protos'}"})
        old.cwd = tree
        if not (tree / "service" / "supervisor.py").exists():  # older than --frontends
            at = old.args.index("--frontends")
            del old.args[at : at + 2]
        if old.local_socket and not (tree / "service" / "handlers" / "local_rpc.py").exists():
            at = old.args.index("--grpc-local-socket")  # older than the local RPC socket
            del old.args[at : at + 2]
            old.local_socket = ""
        short = short_commit(ref)
        servers.append(Server(ref if short == ref else f"{ref} ({short})", old))
    for server in servers:
        stack.callback(server.process.stop)
        server.process.start(timeout=90)
    return servers


def h2load_bodies(folder: Path) -> dict[str, Path | None]:
    """Each workload's request as h2load's body file; None each without h2load."""
    bodies: dict[str, Path | None] = {w.key: None for w in WORKLOADS}
    for work in WORKLOADS if have_h2load() else ():
        body = bodies[work.key] = folder / f"{work.key}.body"
        body.write_bytes(grpc_body(work.request().SerializeToString()))
    return bodies


def alternate(
    servers: list[Server], workloads: Sequence[Workload], bodies: dict[str, Path | None],
    args: argparse.Namespace, p50: Callable[[Server], float],
) -> None:  # fmt: skip
    """Every round: each workload on each server, one at a time, the order alternating
    between rounds; then ``p50`` at c=1 of each (unless ``--only`` leaves latency out)."""
    for index in range(args.rounds):
        order = servers if index % 2 == 0 else servers[::-1]
        for work in workloads:
            for server in order:
                sample = measure(server, work, bodies[work.key], args.duration)
                server.samples.setdefault(work.key, []).append(sample)
                print(
                    f"round {index + 1} {server.label:>12} {work.key:>14}: "
                    f"{sample.cpu_us:6.0f} µs/req {sample.req_s:7.0f} req/s",
                    file=sys.stderr,
                )
        if args.only and "latency" not in args.only:
            continue
        for server in order:
            server.p50_ms.append(p50(server))
            print(f"round {index + 1} {server.label:>12} p50 {server.p50_ms[-1]:.3f} ms")


def loadgen_p50(server: Server, seconds: float) -> float:
    """add_sub's p50 at c=1 with the Python load generator (ms)."""
    spec = LoadSpec(server.process.url, "add_sub", 1, seconds, 1.0)
    result = asyncio.run(run_load(replace(spec, max_requests=10**6), LATENCY.request()))
    return result.latency_ms["p50"]


def measure_all(args: argparse.Namespace) -> tuple[list[Server], list[Workload], str]:
    """Every round of every workload on every server; the client that drove them."""
    client = "h2load (nghttp2)" if have_h2load() else "Python loadgen (h2load not found)"
    if not have_h2load():
        print(f"cpu-bench: {INSTALL_HINT}; using the Python load generator", file=sys.stderr)
    workloads = [w for w in WORKLOADS if not args.only or w.key in args.only]
    with ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="cpu-bench-")))
        repo = tmp / "repo"
        add_sub(repo)
        add_sub(repo, "add_sub_batch", extra=batching(None))
        one = "instance_group [ { count: 1 kind: KIND_CPU } ]\n"
        identity_backend(repo, "identity_1m", str(IDENTITY_FLOATS), extra=one)
        bodies = h2load_bodies(tmp)
        servers = start_servers(stack, repo, args)
        alternate(servers, workloads, bodies, args, lambda s: loadgen_p50(s, args.latency_seconds))
    return servers, workloads, client


def _cpu(server: Any, key: str) -> float:
    return median(s.cpu_us for s in server.samples.get(key, []))


def _rate(server: Any, key: str) -> float:
    return median(s.req_s for s in server.samples.get(key, []))


def _table(servers: Sequence[Any], workloads: Sequence[Workload]) -> list[str]:
    bare, ours, *others = servers
    head = ["workload", "concurrency", "bare µs/req", "ours µs/req", "ours / bare"]
    head += [f"{o.label} µs/req" for o in others] + ["bare req/s", "ours req/s"]
    rows = []
    for work in workloads:
        b, o = _cpu(bare, work.key), _cpu(ours, work.key)
        rows.append(
            [work.title, work.concurrency, f"{b:.0f}", f"{o:.0f}", f"{o / b:.2f}"]
            + [f"{_cpu(other, work.key):.0f}" for other in others]
            + [f"{_rate(bare, work.key):.0f}", f"{_rate(ours, work.key):.0f}"]
        )
    return table(head, rows, "l" + "r" * (len(head) - 1))


def _targets(servers: Sequence[Any], measured: set[str]) -> list[str]:
    """The issue's targets whose workloads this run measured (``--only`` leaves some out)."""
    bare, ours, *others = servers
    unbatched, batched = _cpu(ours, "add_sub"), _cpu(ours, "add_sub_batch")
    # (target, measured, wanted, met, the workloads it needs)
    Target = tuple[str, str, str, bool, set[str]]

    def ratio(key: str, title: str, bound: float, yardstick: Any) -> Target:
        value = _cpu(ours, key) / _cpu(yardstick, key)
        name = f"{title}: ours / {yardstick.label}"
        return name, f"{value:.2f}", f"≤ {bound:.2f}", value <= bound, {key}

    add, identity = ("add_sub", "add_sub c=8", 1.15), ("identity_1m", "identity 1 MiB c=1", 1.3)
    rows = [
        ratio(*add, bare),
        (
            "add_sub: batching c=32 vs unbatched c=8 (ours, µs/req)",
            f"{batched:.0f} vs {unbatched:.0f}", "batched ≤ unbatched", batched <= unbatched,
            {"add_sub", "add_sub_batch"},
        ),
        ratio(*identity, bare),
    ]  # fmt: skip
    for same_loop in (o for o in others if o.label == "bare+uvloop"):  # ours runs on uvloop
        rows += [ratio(*add, same_loop), ratio(*identity, same_loop)]
    for other in others:
        if other.label.startswith("bare") or not (ours.p50_ms and other.p50_ms):
            continue
        mine, theirs = median(ours.p50_ms), median(other.p50_ms)
        rows.append(
            (
                f"add_sub p50 at c=1: ours vs {other.label} (ms)", f"{mine:.3f} vs {theirs:.3f}",
                f"≤ {other.label} + 0.1 ms", mine <= theirs + 0.1, set(),
            )
        )  # fmt: skip
    cells = [(n, v, w, "yes" if ok else "NO") for n, v, w, ok, needs in rows if needs <= measured]
    return table(["target", "measured", "wanted", "met"], cells, "lrlc")


def _floors(servers: Sequence[Any]) -> list[str]:
    """What the least rule-abiding server costs, against the 1.15 x bare target."""
    bare, ours, *others = servers
    floors = [o for o in others if o.label in FLOORS]
    if not floors:
        return []
    base, mine = _cpu(bare, "add_sub"), _cpu(ours, "add_sub")
    cells = []
    for floor in floors:
        cost = _cpu(floor, "add_sub")
        cells.append([floor.label, FLOORS[floor.label][1], f"{cost:.0f}", f"{cost / base:.2f}"])
        cells[-1].append(f"{mine / cost:.2f}")
    head = ["server", "what it adds to bare+uvloop", "µs/req", "/ bare", "ours / it"]
    return [
        "## Floors under ours (add_sub c=8)",
        "",
        "The bare servicer on uvloop with only what this project's rules and backend add: "
        "a model may not run on the loop's thread, and add_sub is an ONNX model. Nothing "
        "else of ours (no configs, validation, schedulers, statistics).",
        "",
        *table(head, cells, "llrrr"),
        "",
        f"The target, 1.15 x bare, is {1.15 * base:.0f} µs/req.",
        "",
    ]


def _threads(servers: Sequence[Any], workloads: Sequence[Workload]) -> list[str]:
    """Per thread, µs of CPU per request (user + system), medians over rounds."""
    cells = []
    for server in servers:
        for work in workloads:
            samples = server.samples.get(work.key, [])
            for name in sorted({n for s in samples for n in s.threads}):
                user = median(s.threads[name][0] for s in samples if name in s.threads)
                system = median(s.threads[name][1] for s in samples if name in s.threads)
                if user + system >= 1:
                    cells.append([server.label, work.key, name, f"{user:.0f}", f"{system:.0f}"])
    head = ["server", "workload", "thread", "user µs/req", "system µs/req"]
    return table(head, cells, "lllrr")


def render(
    servers: Sequence[Any], workloads: Sequence[Workload], args: argparse.Namespace, client: str
) -> str:
    lines = [
        "# Server CPU per request: ours vs a bare grpc.aio servicer",
        "",
        f"Command: `{args.command}`  ",
        f"Commit {short_commit()}; {os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.2f} "
        f"at the end (other work on the machine); client: {client}; {args.rounds} round(s) of "
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
    ]
    if any(s.p50_ms for s in servers):  # measured unless --only left it out
        lines += ["## Latency (Python grpc.aio client, closed loop, concurrency 1)", ""]
        p50s = [(s.label, f"{median(s.p50_ms):.3f}") for s in servers]
        lines += [*table(["server", "add_sub p50 at c=1 (ms)"], p50s, "lr"), ""]
    lines += ["## Every round (µs/req)", ""]
    for s in servers:
        lines += [f"- {s.label}, {k}: " + ", ".join(f"{x.cpu_us:.0f}" for x in xs)
                  for k, xs in s.samples.items()]  # fmt: skip
    unanswered = [
        f"- {s.label}, {key}: the client got {sum(x.answered for x in xs)} answers, the "
        f"server counted {sum(x.counted for x in xs)} successes"
        for s in servers
        for key, xs in s.samples.items()
        if sum(x.answered for x in xs) > sum(x.counted for x in xs)
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
        quick = {"duration": 3.0, "rounds": 1, "latency_seconds": 3.0}
        window_args(p, 8.0, rounds=3, quick="short run, prints only", quick_values=quick)
        p.add_argument("--latency-seconds", type=float, default=6.0)
        p.add_argument(
            "--baseline-ref", action="append", default=[],
            help="also measure our server as of this git ref (repeatable)",
        )  # fmt: skip
        p.add_argument(
            "--frontends", type=int, default=0, help="ours' --frontends (0: one process)"
        )
        p.add_argument("--floors", action="store_true", help="also the bare servicer's floors")
        p.add_argument("--only", nargs="*", default=[], help="workload keys to run (default: all)")
        p.add_argument("--threads", action="store_true", help="report CPU per thread too")
        p.add_argument("--out", type=Path, help="report (default results/cpu_bench.md, full runs)")

    @staticmethod
    def run(args: argparse.Namespace) -> int:
        servers, workloads, client = measure_all(args)
        out = args.out
        if out is None and not args.quick and not args.only:
            out = RESULTS / "cpu_bench.md"
        publish(render(servers, workloads, args, client), out)
        return 0
