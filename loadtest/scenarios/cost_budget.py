"""What one request costs, by process role, in the layout serve.sh starts.

The service (``--frontends`` one per core by default, as serve.sh) and the REST gateway
on its local socket, on a repository of the workloads below; h2load drives each workload
(gRPC, or REST over HTTP/1.1 through the gateway) for a window, and every thread of every
process is read from /proc before and after: CPU per request the server counted, by role
(the gateway, each frontend's loop and grpc's threads, the engine's loop, its instance
threads, ONNX Runtime's pools, Python model workers; ``loadtest/roles.py``).
``--profile S`` then samples the costliest process of each workload for S seconds with
py-spy (``record --native``) and reduces it to where the samples went
(``loadtest/profile_summary.py``). Issue 37 item 1: every cut is judged by this table.
``--baseline-ref REF`` serves REF's tree (``git archive``) beside this one, rounds
alternating between them, each with its own columns: a before/after from one run.

    .venv/bin/python -m loadtest cost-budget                  # ~2 min; results/cost_budget.md
    .venv/bin/python -m loadtest cost-budget --profile 4      # + a native profile each
    .venv/bin/python -m loadtest cost-budget --frontends 0 --only add_sub --quick
    .venv/bin/python -m loadtest cost-budget --only add_sub --baseline-ref main --rounds 6
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from gateway_process import GatewayProcess
from server_process import ServerProcess

from loadtest import REPO_ROOT, RESULTS
from loadtest.h2grpc import INSTALL_HINT, answered, grpc_body, h2load, have_h2load, model_successes
from loadtest.loadgen import infer_request
from loadtest.metrics import machine_busy_seconds
from loadtest.processes import engine_pid
from loadtest.profile_summary import parse_raw, summary_lines
from loadtest.report import command, fmt, loadavg, median, publish, short_commit, table, write_json
from loadtest.repository import add_sub, batching, identity_backend
from loadtest.roles import ROLE_ORDER, classify, per_request, snapshot
from loadtest.scenario import Scenario, register, window_args
from loadtest.scenarios.cpu_bench import baseline_tree

PY_ADD_SUB = REPO_ROOT / "tests" / "python_models" / "add_sub" / "1" / "model.py"
PY_IDENTITY = """import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse(
            [pb_utils.Tensor("OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())])
            for r in requests]
"""

ONE_INSTANCE = "instance_group [ { count: 1 kind: KIND_CPU } ]\n"


@dataclass(frozen=True)
class Workload:
    key: str
    title: str
    model: str
    concurrency: int
    connections: int  # h2load -c; the rest of the concurrency is streams per connection
    inputs: tuple[tuple[str, tuple[int, ...]], ...]
    rest: bool = False  # through the gateway, JSON over HTTP/1.1

    def tensors(self) -> dict[str, np.ndarray]:
        rng = np.random.default_rng(0)
        return {n: rng.standard_normal(s).astype("<f4") for n, s in self.inputs}

    def body(self) -> bytes:
        if not self.rest:
            return grpc_body(infer_request(self.model, self.tensors()).SerializeToString())
        inputs = [
            {"name": n, "shape": list(a.shape), "datatype": "FP32", "data": a.ravel().tolist()}
            for n, a in self.tensors().items()
        ]
        return json.dumps({"inputs": inputs}).encode()


ADD_SUB = (("INPUT0", (1, 16)), ("INPUT1", (1, 16)))
MIB = 262_144  # FP32 elements in 1 MiB
WORKLOADS = (
    Workload("add_sub", "ONNX add_sub [1,16], no batching, c=8", "add_sub", 8, 2, ADD_SUB),
    Workload("add_sub_c1", "ONNX add_sub [1,16], c=1 (the latency path)", "add_sub", 1, 1, ADD_SUB),
    Workload(
        "add_sub_batch", "ONNX add_sub, dynamic batching, c=32", "add_sub_batch", 32, 4, ADD_SUB
    ),
    Workload("py_add_sub", "Python add_sub (Triton's model.py), c=8", "py_add_sub", 8, 2, ADD_SUB),
    Workload(
        "rest_add_sub", "REST JSON add_sub via the gateway, c=8", "add_sub", 8, 8, ADD_SUB, True
    ),
    Workload(
        "identity_1m", "identity 1 MiB (built-in), c=1", "identity", 1, 1, (("INPUT0", (MIB,)),)
    ),
    Workload(
        "py_identity_64m", "Python identity 64 MiB, c=1", "py_identity", 1, 1,
        (("INPUT0", (64 * MIB,)),),
    ),
)  # fmt: skip


def write_repository(root: Path) -> None:
    """Every workload's model, one instance each."""
    add_sub(root)  # the default repository's, as cpu-bench serves it
    add_sub(root, "add_sub_batch", extra=batching(None))
    identity_backend(root, "identity", extra=ONE_INSTANCE)
    io = '{{ name: "{0}{1}" data_type: TYPE_FP32 dims: [ {2} ] }}'
    for name, code, tensors, dims, extra in (
        ("py_add_sub", PY_ADD_SUB.read_text(encoding="utf-8"), 2, "16", "max_batch_size: 8\n"),
        ("py_identity", PY_IDENTITY, 1, "-1", ""),
    ):
        (root / name / "1").mkdir(parents=True)
        (root / name / "1" / "model.py").write_text(code, encoding="utf-8")
        ins = ", ".join(io.format("INPUT", i, dims) for i in range(tensors))
        outs = ", ".join(io.format("OUTPUT", i, dims) for i in range(tensors))
        config = f'name: "{name}"\nbackend: "python"\n{extra}input [ {ins} ]\noutput [ {outs} ]\n'
        (root / name / "config.pbtxt").write_text(config + ONE_INSTANCE, encoding="utf-8")


@dataclass
class Window:
    roles: dict[str, float]  # µs per request
    total_us: float
    req_s: float
    counted: int
    answered: int
    others_cores: float  # what the rest of the machine took meanwhile
    hottest_pid: int
    hottest_kind: str


def run_window(
    server: ServerProcess, gateway: GatewayProcess, work: Workload, body: Path, seconds: float
) -> Window:
    """A short warm-up, then one measured window of ``work``."""
    engine = engine_pid(server)

    def drive(length: float) -> int:
        url = gateway.url if work.rest else server.url
        path = f"/v2/models/{work.model}/infer" if work.rest else ""
        streams = max(1, work.concurrency // work.connections)
        out = h2load(url, body, work.connections, streams, length, rest_path=path)
        return answered(out)

    drive(min(1.5, seconds / 2))
    kinds = classify(server.pid, engine, gateway.pid)
    before_ok, busy0 = model_successes(server.url, work.model), machine_busy_seconds() or 0.0
    before, start = snapshot(kinds), time.perf_counter()
    client = drive(seconds)
    elapsed = time.perf_counter() - start
    after = snapshot(kinds)
    busy = (machine_busy_seconds() or 0.0) - busy0
    counted = model_successes(server.url, work.model) - before_ok
    roles = per_request(before, after, kinds, counted)
    total = sum(roles.values())
    per_pid = {
        pid: sum(u + s for u, s in threads.values())
        - sum(u + s for u, s in before.get(pid, {}).values())
        for pid, threads in after.items()
    }
    hottest = max(per_pid, key=lambda pid: per_pid[pid])
    return Window(
        roles, total, counted / elapsed, counted, client,
        max(0.0, busy / elapsed - total * counted / elapsed / 1e6), hottest, kinds[hottest].kind,
    )  # fmt: skip


def profile(pid: int, seconds: float, out: Path, gil: bool = False) -> bool:
    """py-spy's native raw profile of ``pid`` into ``out``; False when py-spy is missing.
    ``gil``: only the thread holding the GIL, Python frames (what the interpreter runs,
    never a thread blocked in a system call)."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(spy).exists():
        return False
    mode = "--gil" if gil else "--native"
    command_line = [spy, "record", mode, "-p", str(pid), "-d", str(max(1, round(seconds)))]
    command_line += ["-r", "250", "-f", "raw", "-o", str(out)]
    done = subprocess.run(command_line, capture_output=True, text=True, timeout=seconds + 60)
    return done.returncode == 0 and out.exists()


def measure(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    """Every workload, ``args.rounds`` times, then each workload's profile when asked."""
    write_repository(tmp / "repo")
    workloads = [w for w in WORKLOADS if not args.only or w.key in args.only]
    bodies = {}
    for work in workloads:
        bodies[work.key] = tmp / f"{work.key}.body"
        bodies[work.key].write_bytes(work.body())
    flags = ["--frontends", str(args.frontends), "--allow-metrics=false"]
    with ExitStack() as stack:
        trees = [("", REPO_ROOT)]
        if args.baseline_ref:
            trees.append(
                (f" @ {args.baseline_ref}", stack.enter_context(baseline_tree(args.baseline_ref)))
            )
        served = [_serve(stack, tmp / "repo", flags, suffix, tree) for suffix, tree in trees]
        windows = _rounds(served, workloads, bodies, args)
        server, gateway = served[0][1], served[0][2]
        profiles = _profiles(
            server, gateway, workloads, bodies, windows, args.profile, tmp,
            args.profile_kind, args.profile_gil,
        )  # fmt: skip
        for _, each, its_gateway in served:
            its_gateway.stop(timeout=30)
            code = each.stop(timeout=60)
            if code != 0:
                raise RuntimeError(f"the server exited with {code}:\n{each.log[-2000:]}")
    columns = [w.key + suffix for suffix, _ in trees for w in workloads]
    return {"workloads": workloads, "windows": windows, "profiles": profiles, "columns": columns}


Served = tuple[str, ServerProcess, GatewayProcess]


def _serve(stack: ExitStack, repo: Path, flags: list[str], suffix: str, tree: Path) -> Served:
    """The service from ``tree`` (this one, or a ``--baseline-ref``'s ``git archive``, its
    own packages first) with a REST gateway of this tree on its local socket."""
    env = {} if tree == REPO_ROOT else {"PYTHONPATH": f"{tree}{os.pathsep}{tree / 'protos'}"}
    server = ServerProcess([repo], extra_args=flags, env=env)
    server.cwd = tree
    stack.callback(lambda: server.running and server.kill())
    server.start(timeout=120)
    gateway = GatewayProcess(server.url)
    stack.callback(lambda: gateway.running and gateway.kill())
    gateway.start(timeout=60)
    return suffix, server, gateway


def _rounds(
    served: Sequence[Served], workloads: Sequence[Workload], bodies: Mapping[str, Path],
    args: argparse.Namespace,
) -> dict[str, list[Window]]:  # fmt: skip
    """Each round runs every workload on each tree, the trees' order alternating, so the
    machine's other load falls on both alike."""
    windows: dict[str, list[Window]] = {}
    for index in range(args.rounds):
        for suffix, server, gateway in served if index % 2 == 0 else served[::-1]:
            for work in workloads:
                window = run_window(server, gateway, work, bodies[work.key], args.duration)
                windows.setdefault(work.key + suffix, []).append(window)
                print(
                    f"round {index + 1} {work.key + suffix:>24}: {window.total_us:7.0f} µs/req "
                    f"{window.req_s:7.0f} req/s (hottest: {window.hottest_kind})",
                    file=sys.stderr,
                )
    return windows


def _profiles(
    server: ServerProcess, gateway: GatewayProcess, workloads: Sequence[Workload],
    bodies: Mapping[str, Path], windows: Mapping[str, list[Window]], seconds: float, tmp: Path,
    role: str = "hottest", gil: bool = False,
) -> dict[str, dict[str, Any]]:  # fmt: skip
    """Each workload's costliest process (or busiest of kind ``role``) under py-spy while
    h2load drives it."""
    profiles: dict[str, dict[str, Any]] = {}
    for work in workloads if seconds > 0 else ():
        hottest = windows[work.key][-1]
        raw = tmp / f"{work.key}.raw"
        url = gateway.url if work.rest else server.url
        path = f"/v2/models/{work.model}/infer" if work.rest else ""
        streams = max(1, work.concurrency // work.connections)
        load = _background_load(url, bodies[work.key], work, streams, seconds + 2, path)
        time.sleep(1.0)
        pid, kind = hottest.hottest_pid, hottest.hottest_kind
        if role != "hottest":  # the busiest process of that kind instead
            pid, kind = _busiest(server, gateway, role), role
        ok = profile(pid, seconds, raw, gil)
        load.wait(timeout=seconds + 90)
        if ok:
            with open(raw, encoding="utf-8", errors="replace") as lines:
                parsed = parse_raw(lines)
            mode = "--gil" if gil else "--native"
            profiles[work.key] = {"kind": kind, "mode": mode, "lines": summary_lines(parsed)}
    return profiles


def _busiest(server: ServerProcess, gateway: GatewayProcess, kind: str) -> int:
    """The process of ``kind`` that used the most CPU over a quarter of a second."""
    kinds = classify(server.pid, engine_pid(server), gateway.pid)
    pids = [pid for pid, k in kinds.items() if k.kind == kind]
    if not pids:
        raise RuntimeError(f"no {kind} process to profile")
    first = snapshot(pids)
    time.sleep(0.25)
    last = snapshot(pids)

    def used(pid: int) -> float:
        after, before = last.get(pid, {}), first.get(pid, {})
        return sum(u + s for u, s in after.values()) - sum(u + s for u, s in before.values())

    return max(pids, key=used)


def _background_load(
    url: str, body: Path, work: Workload, streams: int, seconds: float, path: str
) -> subprocess.Popen[bytes]:
    """h2load in the background for ``seconds`` (the profile's load)."""
    code = (
        "import sys; from pathlib import Path; from loadtest.h2grpc import h2load; "
        f"h2load({url!r}, Path({str(body)!r}), {work.connections}, {streams}, {seconds}, "
        f"rest_path={path!r})"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), str(REPO_ROOT / "tests")])}
    return subprocess.Popen([sys.executable, "-c", code], cwd=REPO_ROOT, env=env)


def report(args: argparse.Namespace, argv: Sequence[str], data: Mapping[str, Any]) -> str:
    workloads: list[Workload] = data["workloads"]
    windows: dict[str, list[Window]] = data["windows"]
    roles = [
        r
        for r in ROLE_ORDER
        if any(w.roles.get(r, 0.0) >= 0.5 for ws in windows.values() for w in ws)
    ]
    layout = f"--frontends {args.frontends}" if args.frontends else "one process (--frontends 0)"
    lines = [
        "# What one request costs, by process role",
        "",
        f"Command: `{command(argv)}`  ",
        f"Commit {short_commit()}; {os.cpu_count()} CPUs; load average {loadavg()} at the end; "
        f"layout: the service with {layout} and the REST gateway on its local socket, as "
        f"serve.sh starts them; client: h2load; {args.rounds} round(s) of {args.duration:g} s, "
        "medians over rounds.",
        "",
        "µs of CPU (user + system) per request the server counted (ModelStatistics), by the "
        'role of each thread of each process (`loadtest/roles.py`). "Others\' cores" is what '
        "the rest of the machine (the client, other work) used meanwhile.",
        "",
    ]

    def cell(key: str, role: str) -> str:
        values = [w.roles.get(role, 0.0) for w in windows[key]]
        return fmt(median(values), 0) if any(values) else ""

    # A --baseline-ref's windows are columns of their own ("add_sub @ main").
    columns: list[str] = data.get("columns") or [w.key for w in workloads]
    head = ["role", *columns]
    rows = [[role, *(cell(key, role) for key in columns)] for role in roles]
    rows.append(["**total**", *(fmt(median(x.total_us for x in windows[k]), 0) for k in columns)])
    rows.append(["req/s", *(fmt(median(x.req_s for x in windows[k]), 0) for k in columns)])
    rows.append(
        ["others' cores", *(fmt(median(x.others_cores for x in windows[k]), 2) for k in columns)]
    )
    lines += table(head, rows, "l" + "r" * len(columns))
    lines += ["", "Workloads:", ""]
    lines += [f"- `{w.key}`: {w.title}" for w in workloads]
    for key, prof in data["profiles"].items():
        mode = prof.get("mode", "--native")
        lines += ["", f"## Profile: `{key}`, the {prof['kind']} process (py-spy {mode})", ""]
        lines += prof["lines"]
    if data["profiles"]:
        lines += [
            "",
            "A sample belongs to the first frame, from the leaf up, that is ours, grpc's, ONNX "
            "Runtime's, numpy's, uvloop's or asyncio's: our code owns the system calls it "
            "makes, uvloop the polling between our callbacks. py-spy samples all threads of "
            "the process, and a thread in a blocking call (`epoll_wait`, `recv`, `select`, "
            "a futex: unnamed libc addresses) around its wake-up can be sampled as active, so "
            "those shares are upper bounds; the table above (from /proc) is the measure.",
        ]
    return "\n".join(lines) + "\n"


@register
class CostBudget(Scenario):
    """CPU per request by process role (gateway, frontends, engine, workers), h2load."""

    name = "cost-budget"

    @staticmethod
    def add_cli_args(parser: argparse.ArgumentParser) -> None:
        quick = "2 s windows, prints only"
        window_args(parser, 5.0, rounds=1, quick=quick, quick_values={"duration": 2.0})
        parser.add_argument("--frontends", type=int, default=os.cpu_count() or 1)
        parser.add_argument("--only", nargs="*", default=[], help="workload keys")
        parser.add_argument("--profile", type=float, default=0.0, help="py-spy seconds each")
        parser.add_argument(
            "--profile-kind",
            default="hottest",
            choices=["hottest", "frontend", "engine", "python_worker", "gateway"],
            help="which process --profile samples (default: the costliest)",
        )
        parser.add_argument(
            "--profile-gil",
            action="store_true",
            help="sample only the thread holding the GIL (Python frames, no blocked threads)",
        )
        parser.add_argument(
            "--baseline-ref",
            default="",
            help="also serve this git ref (git archive), rounds alternating; its own columns",
        )
        parser.add_argument("--out", type=Path, default=None)

    @staticmethod
    def run(args: argparse.Namespace) -> int:
        if not have_h2load():
            print(f"cost-budget: {INSTALL_HINT}", file=sys.stderr)
            return 2
        argv = sys.argv[1:]
        with tempfile.TemporaryDirectory(prefix="cost-budget-") as tmp:
            data = measure(args, Path(tmp))
        out = None if args.quick else (args.out or RESULTS / "cost_budget.md")
        publish(report(args, argv, data), out)
        if out is not None:
            raw = {key: [w.__dict__ for w in ws] for key, ws in data["windows"].items()}
            write_json(raw, out.with_suffix(".json"))
        return 0
