"""Server CPU per request: our server against a bare grpc.aio servicer, in one run.

The bare servicer (asyncio's loop and uvloop), ours, and ours as of each ``--baseline-ref``
side by side on loopback under h2load (the Python load generator without it, said so):
the server tree's CPU over a window / the successes it counted; rounds alternate the
servers; then p50 at concurrency 1. ``--triton`` adds the real Triton 2.51 (issue 25),
``--mlserver`` MLServer 1.7.1 (issue 37, ``loadtest/mlserver.py``), ``--perf-analyzer`` takes
p50 with perf_analyzer over gRPC and REST (ours through its gateway). loadtest/README.md,
"Server CPU per request".

    .venv/bin/python -m loadtest cpu-bench --baseline-ref main   # ~5 min; results/cpu_bench.md
    .venv/bin/python -m loadtest cpu-bench --quick --only add_sub --threads   # smoke run
    .venv/bin/python -m loadtest cpu-bench --floors --only add_sub   # + the floors under ours
    .venv/bin/python -m loadtest cpu-bench --triton --perf-analyzer --frontends 2   # ~8 min
    .venv/bin/python -m loadtest cpu-bench --triton --mlserver --perf-analyzer   # ~20 min
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import socket
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
from gateway_process import GatewayProcess
from models import add_sub_model
from server_process import LoggedProcess, ServerProcess

from inference import grpc_service_pb2 as pb
from loadtest import REPO_ROOT, RESULTS, mlserver
from loadtest.h2grpc import INSTALL_HINT, answered, grpc_body, h2load, have_h2load, model_successes
from loadtest.loadgen import LoadSpec, infer_request, run_load
from loadtest.metrics import thread_cpu_seconds, tree_cpu_seconds
from loadtest.perf_analyzer import perf_analyzer_p50
from loadtest.processes import bare_servicer
from loadtest.report import median, publish, short_commit, table
from loadtest.repository import add_sub, batching, identity_backend, onnx_model
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
        "add_sub_py", "Triton's add_sub model.py as a Python model by both, c=8", "add_sub_py",
        8, 2, ADD_SUB,
    ),
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
    "bare+hop+thread+ort": (
        ["--hop", "--onnxruntime"],
        "the model in a second process behind a socket, as the engine behind a frontend",
    ),
    "bare+hop+ort": (
        ["--hop", "--hop-inline", "--onnxruntime"],
        "the model on the second process's loop, no thread (the engine's small-model path)",
    ),
}
# --triton: start_triton.sh of the reference (python backend only, metrics off) serves the
# same configs as Python models: the tests' add_sub model.py (add_sub, simple), PY_IDENTITY.
REFERENCE = REPO_ROOT.parent / "shared" / "triton-qa" / "reference" / "start_triton.sh"
PERF_ANALYZER = Path.home() / "perf-analyzer" / "bin" / "perf_analyzer"
PY_ADD_SUB = REPO_ROOT / "tests" / "python_models" / "add_sub" / "1" / "model.py"
PY_IDENTITY = """import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        inputs = [pb_utils.get_input_tensor_by_name(r, "INPUT0") for r in requests]
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", t.as_numpy())])
                for t in inputs]
"""
TRITON = """`Triton` is the real Triton 2.51 (`start_triton.sh` of `../shared/triton-qa/reference`:
python backend only, metrics off) serving the same configs as Python models (add_sub and
`simple`: the tests' add_sub model.py); ours serves them as ONNX models and identity by its
built-in backend, metrics off as Triton's; one instance each."""
MLSERVER = f"""`MLServer` is MLServer {mlserver.VERSION} (`loadtest/mlserver.py`, its own virtual
environment) serving every workload by a custom runtime in numpy (`loadtest/mlserver_runtime.py`:
add/sub, identity) over its V2 gRPC endpoint, driven by the same client and request bytes;
its settings are its defaults but `debug` and metrics off; add_sub_batch by its adaptive
batching (max_batch_size 8, max_batch_time 0.5 ms: it batches nothing at 0); successes are
the runtime's own count (MLServer has no ModelStatistics)."""
RIVALS = ("Triton", "MLServer")  # the other servers, rated by req/s beside ours
# perf_analyzer reads ModelConfig, which MLServer does not serve (the bare servicer serves
# simple's, for grpc.aio's own p50 beside ours).
NO_PERF_ANALYZER = ("MLServer",)


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
    # (url, model) -> the successes the server counted so far (ModelStatistics where it has it)
    successes: Callable[[str, str], int] = model_successes
    http_url: str = ""  # its REST endpoint, for perf_analyzer -i http
    p50_rest_ms: list[float] = field(default_factory=list)


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
    count0, cpu0 = server.successes(url, work.model), tree_cpu_seconds(pid) or 0.0
    threads0, start = thread_cpu_seconds(pid), time.perf_counter()
    client_count = run(seconds)
    elapsed = time.perf_counter() - start
    cpu1, threads1 = tree_cpu_seconds(pid) or 0.0, thread_cpu_seconds(pid)
    counted = server.successes(url, work.model) - count0
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
    bare on uvloop, the floors when asked, and ours as of each ``--baseline-ref``; Triton
    and MLServer after ours when asked; with ``--perf-analyzer`` our REST gateway too."""
    bares = {"bare": [], "bare+uvloop": ["--uvloop"]}
    if args.floors:
        bares.update({label: ["--uvloop", *flags] for label, (flags, _) in FLOORS.items()})
    servers = [Server(label, bare_servicer(label, *flags)) for label, flags in bares.items()]
    metrics = ["--allow-metrics=false"] if args.triton else []  # as Triton's
    layout = ["--frontends", str(args.frontends), *metrics]  # ours and each baseline alike
    ours = ServerProcess([repo], extra_args=layout)
    servers.insert(
        1, Server(f"ours{f' --frontends {args.frontends}' * bool(args.frontends)}", ours)
    )
    if args.triton:
        grpc_port, http_port = free_port(), free_port()
        theirs = [str(args.triton), "--model-repository", str(python_copy(repo))]
        theirs += [f"--grpc-port={grpc_port}", f"--http-port={http_port}"]
        triton = Server("Triton", LoggedProcess(theirs), http_url=f"127.0.0.1:{http_port}")
        servers.insert(2, triton)
    for at, workers in enumerate(args.mlserver_workers if args.mlserver else ()):
        root = mlserver_copy(repo.parent / f"mlserver{workers}", workers)
        process = mlserver.MLServerProcess(mlserver.ensure_venv(), root, free_port(), free_port())
        label = "MLServer" if workers == 1 else f"MLServer workers={workers}"  # 1: its default
        theirs_too = Server(label, process, successes=mlserver.successes)
        servers.insert(2 + bool(args.triton) + at, theirs_too)
    for ref in args.baseline_ref:
        tree = stack.enter_context(baseline_tree(ref))
        # Its own packages first (generated protos included), this environment's libraries.
        path = {"PYTHONPATH": f"{tree}{os.pathsep}{tree / 'protos'}"}
        old = ServerProcess([repo], extra_args=layout, env=path)
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
    if args.perf_analyzer:  # REST: perf_analyzer through our gateway, as serve.sh runs it
        gateway = GatewayProcess(servers[1].process.url)
        stack.callback(gateway.stop)
        servers[1].http_url = gateway.start().url
    return servers


def mlserver_copy(root: Path, workers: int) -> Path:
    """Our repository's workloads for MLServer: add_sub (and its Python-model twin) and
    identity by the numpy runtimes, add_sub_batch with adaptive batching."""
    batched = {"max_batch_size": 8, "max_batch_time": 0.0005}
    models = {
        "add_sub": mlserver.runtime("AddSub"),
        "add_sub_batch": mlserver.runtime("AddSub", **batched),
        "add_sub_py": mlserver.runtime("AddSub"),
        "identity_1m": mlserver.runtime("Identity"),
    }
    return mlserver.repository(root, models, workers)


def python_add_sub(repo: Path, name: str) -> None:
    """add_sub's config served by the tests' add_sub model.py (Triton's example) as a
    Python model: what issue 37 compares with Triton's python backend."""
    add_sub(repo, name)
    config = (repo / name / "config.pbtxt").read_text(encoding="utf-8")
    config = config.replace('platform: "onnxruntime_onnx"', 'backend: "python"')
    (repo / name / "config.pbtxt").write_text(config, encoding="utf-8")
    for old in (repo / name / "1").iterdir():
        old.unlink()
    (repo / name / "1" / "model.py").write_text(PY_ADD_SUB.read_text(), encoding="utf-8")


def python_copy(ours: Path) -> Path:
    """Our repository for Triton's python backend: each config, ``backend: "python"``."""
    theirs = ours.parent / "triton"
    for model in ours.iterdir():
        config = (model / "config.pbtxt").read_text(encoding="utf-8")
        config = re.sub(r'platform: "onnxruntime_onnx"|backend: "(identity|python)"', "", config)
        (theirs / model.name / "1").mkdir(parents=True)
        (theirs / model.name / "config.pbtxt").write_text(f'backend: "python"\n{config}')
        code = PY_IDENTITY if model.name == "identity_1m" else PY_ADD_SUB.read_text()
        (theirs / model.name / "1" / "model.py").write_text(code, encoding="utf-8")
    return theirs


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def p50_ms(server: Server, args: argparse.Namespace, protocol: str = "grpc") -> float:
    """add_sub's p50 at c=1 with the Python load generator, or with ``--perf-analyzer``
    ``simple``'s over ``protocol`` (grpc, http: the server's ``http_url``); that loads
    libcudart from its own environment. ``-s 1000``: no shared machine is "stable" by
    perf_analyzer's 10 %."""
    if not args.perf_analyzer:
        spec = LoadSpec(server.process.url, "add_sub", 1, args.latency_seconds, 1.0)
        result = asyncio.run(run_load(replace(spec, max_requests=10**6), LATENCY.request()))
        return result.latency_ms["p50"]
    url = server.http_url if protocol == "http" else server.process.url
    return perf_analyzer_p50(args.perf_analyzer, "simple", url, protocol, args.latency_seconds)


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
        python_add_sub(repo, "add_sub_py")
        one = "instance_group [ { count: 1 kind: KIND_CPU } ]\n"
        identity_backend(repo, "identity_1m", str(IDENTITY_FLOATS), extra=one)
        if args.perf_analyzer:  # Triton's example, INT32 [16] x 2
            io = [[(f"{kind}{i}", "INT32", [16]) for i in (0, 1)] for kind in ("INPUT", "OUTPUT")]
            onnx_model(repo, "simple", add_sub_model("INT32", ("batch", 16)), *io, max_batch_size=8)
        bodies: dict[str, Path | None] = {w.key: None for w in WORKLOADS}
        for work in WORKLOADS if have_h2load() else ():
            body = bodies[work.key] = tmp / f"{work.key}.body"
            body.write_bytes(grpc_body(work.request().SerializeToString()))
        servers = start_servers(stack, repo, args)
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
                if args.perf_analyzer and (
                    server.label.startswith(NO_PERF_ANALYZER) or server.label in FLOORS
                ):  # a floor answers simple on its loop: its thread or hop is not in it
                    continue
                server.p50_ms.append(p50_ms(server, args))
                print(f"round {index + 1} {server.label:>12} p50 {server.p50_ms[-1]:.3f} ms")
                if args.perf_analyzer and server.http_url:
                    server.p50_rest_ms.append(p50_ms(server, args, "http"))
                    rest = server.p50_rest_ms[-1]
                    print(f"round {index + 1} {server.label:>12} p50 REST {rest:.3f} ms")
    return servers, workloads, client


def _cpu(server: Any, key: str) -> float:
    return median(s.cpu_us for s in server.samples.get(key, []))


def _rate(server: Any, key: str) -> float:
    return median(s.req_s for s in server.samples.get(key, []))


def _table(servers: Sequence[Any], workloads: Sequence[Workload]) -> list[str]:
    """CPU per request of every server; req/s of bare, ours and the other servers
    (``RIVALS``), with ours / each of those."""
    bare, ours, *others = servers
    rivals = [o for o in others if o.label.startswith(RIVALS)]
    rated = [bare, ours, *rivals]
    head = ["workload", "concurrency", "bare µs/req", "ours µs/req", "ours / bare"]
    head += [f"{o.label} µs/req" for o in others] + [f"{r.label} req/s" for r in rated]
    head += [f"ours / {r.label} req/s" for r in rivals]
    rows = []
    for work in workloads:
        cpu = [f"{_cpu(s, work.key):.0f}" for s in servers]  # bare, ours, then the others
        ratio = f"{_cpu(ours, work.key) / _cpu(bare, work.key):.2f}"
        rates = [f"{_rate(r, work.key):.0f}" for r in rated]
        against = [f"{_rate(ours, work.key) / _rate(r, work.key):.2f}" for r in rivals]
        rows.append([work.title, work.concurrency, *cpu[:2], ratio, *cpu[2:], *rates, *against])
    return table(head, rows, "l" + "r" * (len(head) - 1))


def _targets(servers: Sequence[Any], measured: set[str], p50_of: str = "add_sub") -> list[str]:
    """The issues' targets whose workloads this run measured (``--only`` leaves some out)."""
    bare, ours, *others = servers
    unbatched, batched = _cpu(ours, "add_sub"), _cpu(ours, "add_sub_batch")
    # (target, measured, wanted, met, the workloads it needs)
    Target = tuple[str, str, str, bool, set[str]]

    def ratio(key: str, title: str, bound: float, yardstick: Any, of: Any = _cpu) -> Target:
        """ours / ``yardstick`` of CPU per request (at most ``bound``) or of req/s (at least)."""
        value, sign = of(ours, key) / of(yardstick, key), "≤" if of is _cpu else "≥"
        name = f"{title}: ours / {yardstick.label}"
        return name, f"{value:.2f}", f"{sign} {bound:.2f}", (value <= bound) == (sign == "≤"), {key}

    # Issue 37: server CPU at c=8 within 1.3 x the bare servicer's (issue 25 had 1.15).
    add, identity = ("add_sub", "add_sub c=8", 1.3), ("identity_1m", "identity 1 MiB c=1", 1.3)
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
    for triton in (o for o in others if o.label == "Triton"):  # issue 37's rates
        for key, title, bound in (
            ("add_sub", "add_sub c=8 req/s", 0.8),
            ("add_sub_batch", "add_sub dynamic batching c=32 req/s", 0.5),
            ("identity_1m", "identity 1 MiB c=1 req/s", 1.0),
            ("add_sub_py", "add_sub model.py as a Python model c=8 req/s", 0.8),
        ):
            rows.append(ratio(key, title, bound, triton, _rate))
    for other in others:  # p50: baselines within 0.1 ms; Triton (issue 25); MLServer: none
        if other.label.startswith(("bare", "MLServer")) or not (ours.p50_ms and other.p50_ms):
            continue
        pairs = [("", ours.p50_ms, other.p50_ms)]
        if other.label == "Triton":  # issue 37: over REST as well
            pairs.append((" over REST", ours.p50_rest_ms, other.p50_rest_ms))
        for over, mine_ms, theirs_ms in pairs:
            if not (mine_ms and theirs_ms):
                continue
            mine, theirs = median(mine_ms), median(theirs_ms)
            wanted, bound = f"≤ {other.label} + 0.1 ms", theirs + 0.1
            if other.label == "Triton":
                wanted, bound = "≤ 1.5 x Triton", 1.5 * theirs
            rows.append(
                (
                    f"{p50_of} p50 at c=1{over}: ours vs {other.label} (ms)",
                    f"{mine:.3f} vs {theirs:.3f}", wanted, mine <= bound, set(),
                )
            )  # fmt: skip
    cells = [(n, v, w, "yes" if ok else "NO") for n, v, w, ok, needs in rows if needs <= measured]
    return table(["target", "measured", "wanted", "met"], cells, "lrlc")


def _floors(servers: Sequence[Any]) -> list[str]:
    """What the least rule-abiding server costs, against the 1.15 x bare target."""
    bare, ours, *others = servers
    costs = [(o.label, _cpu(o, "add_sub")) for o in others if o.label in FLOORS]
    if not costs:
        return []
    base, mine = _cpu(bare, "add_sub"), _cpu(ours, "add_sub")
    cells = [[n, FLOORS[n][1], f"{c:.0f}", f"{c / base:.2f}", f"{mine / c:.2f}"] for n, c in costs]
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


def _latency(servers: Sequence[Any], args: argparse.Namespace, p50_of: str) -> list[str]:
    """p50 at c=1 per server: gRPC, and REST where perf_analyzer measured it (ours through
    its gateway, Triton on its HTTP port), with ours / it."""
    tool = "perf_analyzer" if args.perf_analyzer else "Python grpc.aio client"
    ours = servers[1]

    def cells(mine: list[float], theirs: list[float]) -> list[str]:
        if not theirs:
            return ["", ""]
        ratio = f"{median(mine) / median(theirs):.2f}" if mine else ""
        return [f"{median(theirs):.3f}", ratio]

    rows = [
        [s.label, *cells(ours.p50_ms, s.p50_ms), *cells(ours.p50_rest_ms, s.p50_rest_ms)]
        for s in servers
        if s.p50_ms
    ]
    head = ["server", "gRPC p50 (ms)", "ours / it", "REST p50 (ms)", "ours / it"]
    if not any(s.p50_rest_ms for s in servers):
        head, rows = head[:3], [r[:3] for r in rows]
    return [
        f"## Latency ({tool}, closed loop, {p50_of}, concurrency 1)",
        "",
        *table(head, rows, "l" + "r" * (len(head) - 1)),
    ]


def render(
    servers: Sequence[Any], workloads: Sequence[Workload], args: argparse.Namespace, client: str
) -> str:
    p50_of = "simple" if args.perf_analyzer else "add_sub"
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
        *_targets(servers, {w.key for w in workloads}, p50_of),
        "",
        *_floors(servers),
    ]
    others = [(TRITON, args.triton), (MLSERVER, args.mlserver)]
    lines[7:7] = [line for text, asked in others if asked for line in (text, "")]
    if any(s.p50_ms for s in servers):  # measured unless --only left it out
        lines += [*_latency(servers, args, p50_of), ""]
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
        p.add_argument("--frontends", type=int, default=0, help="our --frontends (0: one process)")
        p.add_argument("--floors", action="store_true", help="also the bare servicer's floors")
        p.add_argument("--only", nargs="*", default=[], help="workload keys to run (default: all)")
        p.add_argument("--threads", action="store_true", help="report CPU per thread too")
        path = {"type": Path, "nargs": "?", "metavar": "PATH"}  # the flag alone: the default
        p.add_argument("--triton", **path, const=REFERENCE, help="also the real Triton 2.51")
        p.add_argument(
            "--perf-analyzer", **path, const=PERF_ANALYZER,
            help="p50 on simple by it, gRPC and REST (ours through its gateway)",
        )  # fmt: skip
        p.add_argument(
            "--mlserver", action="store_true",
            help=f"also MLServer {mlserver.VERSION} (its own venv, made on first use)",
        )  # fmt: skip
        p.add_argument(
            "--mlserver-workers", type=int, nargs="+", default=[1], metavar="N",
            help="MLServer's parallel_workers, one server each (1: its default, inference in "
            "a worker process; 0: in its server process)",
        )  # fmt: skip
        p.add_argument("--out", type=Path, help="report (default results/cpu_bench.md, full runs)")

    @staticmethod
    def run(args: argparse.Namespace) -> int:
        missing = [str(f) for f in (args.triton, args.perf_analyzer) if f and not f.exists()]
        if missing:
            hint = "the reference's README; loadtest/README.md, 'perf_analyzer on these machines'"
            print(f"cpu-bench: nothing run, no {', '.join(missing)} ({hint})", file=sys.stderr)
            return 2
        servers, workloads, client = measure_all(args)
        out = args.out
        if out is None and not args.quick and not args.only:
            out = RESULTS / "cpu_bench.md"
        publish(render(servers, workloads, args, client), out)
        return 0
