"""Server CPU per request: our server against a bare grpc.aio servicer, in one run.

A bare servicer (``bare_servicer.py``, on asyncio's loop and on uvloop, which ours uses)
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

    .venv/bin/python loadtest/cpu_bench.py --baseline-ref main  # ~5 min; results/cpu_bench.md
    .venv/bin/python loadtest/cpu_bench.py --quick --only add_sub --threads   # smoke run
    .venv/bin/python loadtest/cpu_bench.py --floors --only add_sub  # + the floors under ours

Without h2load the CPU rows fall back to the Python load generator and say so.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from cpu_report import render
from h2grpc import (
    INSTALL_HINT,
    grpc_body,
    h2load,
    have_h2load,
    model_successes,
)
from loadgen import run_load
from loadresult import LoadSpec, publish_report
from metrics import thread_cpu_seconds, tree_cpu_seconds

from inference import grpc_service_pb2 as pb

REPO_ROOT = Path(__file__).resolve().parent.parent
BARE = REPO_ROOT / "loadtest" / "bare_servicer.py"
sys.path.insert(0, str(REPO_ROOT / "tests"))
from server_process import (  # noqa: E402
    DEFAULT_REPOSITORY,
    SERVICE_PYTHON,
    LoggedProcess,
    ServerProcess,
)

IDENTITY_FLOATS = 262_144  # 1 MiB of FP32
IDENTITY_CONFIG = f"""name: "identity_1m"
backend: "identity"
max_batch_size: 0
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ {IDENTITY_FLOATS} ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ {IDENTITY_FLOATS} ] }} ]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
"""


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
    shutil.copytree(DEFAULT_REPOSITORY / "add_sub", root / "add_sub")
    shutil.copytree(DEFAULT_REPOSITORY / "add_sub", root / "add_sub_batch")
    config = (root / "add_sub" / "config.pbtxt").read_text(encoding="utf-8")
    config = config.replace('name: "add_sub"', 'name: "add_sub_batch"') + "dynamic_batching { }\n"
    (root / "add_sub_batch" / "config.pbtxt").write_text(config, encoding="utf-8")
    (root / "identity_1m" / "1").mkdir(parents=True)
    (root / "identity_1m" / "config.pbtxt").write_text(IDENTITY_CONFIG, encoding="utf-8")
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


def short_commit(ref: str = "HEAD") -> str:
    done = subprocess.run(
        ["git", "rev-parse", "--short", ref], cwd=REPO_ROOT, capture_output=True, text=True
    )
    dirty = ref == "HEAD" and subprocess.run(["git", "diff", "--quiet", "HEAD"], cwd=REPO_ROOT)
    return done.stdout.strip() + ("-dirty" if dirty and dirty.returncode else "")


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
    bares = (("bare", []), ("bare+uvloop", ["--uvloop"]), *(FLOORS if floors else ()))
    for label, extra in bares:
        bare = LoggedProcess([SERVICE_PYTHON, str(BARE), "--grpc-port", "0", *extra])
        bare.name = f"{label} servicer"
        servers.append(Server(label, bare))
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


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
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
    args = p.parse_args(argv)
    if args.quick:
        args.duration, args.rounds, args.latency_seconds = 3.0, 1, 3.0
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    shown = argv if argv is not None else sys.argv[1:]
    command = " ".join([".venv/bin/python loadtest/cpu_bench.py", *map(shlex.quote, shown)])
    client = "h2load (nghttp2)" if have_h2load() else "Python loadgen (h2load not found)"
    if not have_h2load():
        print(
            f"cpu_bench: {INSTALL_HINT}; measuring with the Python load generator, whose "
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
    text = render(servers, workloads, args, client, command, short_commit())
    out = args.out
    if out is None and not args.quick and not args.only:
        out = REPO_ROOT / "loadtest" / "results" / "cpu_bench.md"
    publish_report(text, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
