"""Large tensors, one at a time through tritonclient: ours against the real Triton 2.51.

A Python identity model (the same ``model.py`` on both: ``pb_utils`` only, UINT8 of any
length) is served by ours in the default layout (the service with ``--frontends`` one
per core and the REST gateway on its local socket, as serve.sh starts them) and by the
reference Triton (``start_triton.sh`` of ``../shared/triton-qa/reference``: CPU, python
backend); tritonclient (gRPC and HTTP, from the client environment) sends each size a few
times, alternating the servers, and every answer is checked byte for byte. The figure
is Triton's median round trip over ours: above 1, ours is faster (issue 37, item 5).

    .venv/bin/python -m loadtest big-tensors                     # 16, 64, 256 MiB; ~4 min
    .venv/bin/python -m loadtest big-tensors --mib 16 --repeats 2 --quick
    .venv/bin/python -m loadtest big-tensors --mib 1024 --repeats 1 --rounds 1
    .venv/bin/python -m loadtest big-tensors --baseline-ref main      # before / after too

A size runs only while the machine has ``MEMORY_FACTOR`` times it available (client and
server each hold several copies of a tensor at once: 1 GiB over gRPC took 13.5 GB);
one it skips is named in the report. The gateway's body limit is raised to fit the
largest size (its default, 1 GiB, refuses a 1 GiB tensor with its JSON header).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path
from statistics import median
from typing import Any

from gateway_process import GatewayProcess
from server_process import LoggedProcess, ServerProcess

from loadtest import REPO_ROOT, RESULTS
from loadtest.report import command, loadavg, publish, short_commit, table
from loadtest.scenario import Scenario, register
from loadtest.scenarios.cpu_bench import REFERENCE, baseline_tree, free_port

CLIENT_PYTHON = REPO_ROOT / ".venv-client" / "bin" / "python"
#: A size is measured only with this many times its bytes available (MemAvailable).
MEMORY_FACTOR = 16
LOOP = Path(__file__).resolve().parents[1] / "tensor_round_trips.py"
MODEL = "py_identity"
IDENTITY = """import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse(
            [pb_utils.Tensor("OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())])
            for r in requests]
"""


def write_repository(root: Path) -> None:
    (root / MODEL / "1").mkdir(parents=True)
    (root / MODEL / "1" / "model.py").write_text(IDENTITY, encoding="utf-8")
    (root / MODEL / "config.pbtxt").write_text(
        f'name: "{MODEL}"\nbackend: "python"\nmax_batch_size: 0\n'
        'input [ { name: "INPUT0" data_type: TYPE_UINT8 dims: [ -1 ] } ]\n'
        'output [ { name: "OUTPUT0" data_type: TYPE_UINT8 dims: [ -1 ] } ]\n'
        "instance_group [ { count: 1 kind: KIND_CPU } ]\n",
        encoding="utf-8",
    )


class Ours:
    """Our service and REST gateway, both from ``tree`` (this one, or a baseline's)."""

    def __init__(self, repo: Path, frontends: int, tree: Path, body_limit: int) -> None:
        self.env = {} if tree == REPO_ROOT else {"PYTHONPATH": f"{tree}:{tree / 'protos'}"}
        self.server = ServerProcess([repo], ["--frontends", str(frontends)], env=self.env)
        self.server.cwd = tree  # `python -m service` imports the tree's own packages
        self.tree = tree
        self.body_limit = body_limit
        self.gateway: GatewayProcess | None = None

    def start(self) -> None:
        self.server.start(timeout=120)
        # serve.sh's environment for the gateway: huge-page malloc (decision 045); the
        # service's supervisor sets it for its own children.
        tunables = os.environ.get("GLIBC_TUNABLES", "")
        if "glibc.malloc.hugetlb" not in tunables:
            tunables = (
                f"{tunables}:glibc.malloc.hugetlb=1" if tunables else "glibc.malloc.hugetlb=1"
            )
        limit = ["--http-max-body-bytes", str(self.body_limit)]
        self.gateway = GatewayProcess(
            self.server.url, limit, env={**self.env, "GLIBC_TUNABLES": tunables}
        )
        self.gateway.cwd = self.tree
        self.gateway.start(timeout=60)

    def urls(self) -> dict[str, str]:
        assert self.gateway is not None
        return {"grpc": self.server.url, "http": self.gateway.url}

    def stop(self) -> None:
        if self.gateway is not None:
            self.gateway.stop(timeout=30)
        self.server.stop(timeout=60)


class Servers:
    """Ours (and ours at a baseline ref) and Triton, each with gRPC and HTTP addresses."""

    def __init__(
        self, repo: Path, frontends: int, triton: Path, largest: int, baselines: dict[str, Path]
    ) -> None:
        # Room for the largest tensor and its JSON header (Triton 2.51 has no such limit).
        limit = max(1 << 30, largest + (1 << 20))
        self.ours = {"ours": Ours(repo, frontends, REPO_ROOT, limit)}
        for label, tree in baselines.items():
            self.ours[label] = Ours(repo, frontends, tree, limit)
        grpc_port, http_port = free_port(), free_port()
        self.triton_urls = {"grpc": f"127.0.0.1:{grpc_port}", "http": f"127.0.0.1:{http_port}"}
        self.triton = LoggedProcess(
            [str(triton), "--model-repository", str(repo), f"--grpc-port={grpc_port}",
             f"--http-port={http_port}"]
        )  # fmt: skip

    def start(self) -> None:
        for ours in self.ours.values():
            ours.start()
        self.triton.start(timeout=180)

    def urls(self, label: str) -> dict[str, str]:
        if label == "Triton":
            return self.triton_urls
        return self.ours[label].urls()

    def order(self, rounds: int) -> list[str]:
        """Ours, each baseline, Triton; then back (ours last): alternating."""
        one = [*self.ours, "Triton"]
        return (one + one[::-1])[: rounds * len(one)]

    def stop(self) -> None:
        for ours in self.ours.values():
            ours.stop()
        self.triton.stop(timeout=60)


def round_trips(client: Path, protocol: str, url: str, mib: int, repeats: int) -> dict[str, Any]:
    done = subprocess.run(
        [str(client), str(LOOP), protocol, url, MODEL, str(mib), str(repeats)],
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"{protocol} {url} {mib} MiB failed:\n{done.stdout}{done.stderr}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def available_bytes() -> int:
    """MemAvailable from /proc/meminfo (Linux); a lot where it cannot be read."""
    try:
        with open("/proc/meminfo", encoding="ascii") as info:
            for line in info:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) << 10
    except OSError:
        pass
    return 1 << 62


def measure(
    args: argparse.Namespace, skipped: list[int]
) -> dict[tuple[str, str, int], list[float]]:
    """Round trips by (server, protocol, MiB); ``skipped`` gets the sizes memory refused."""
    seconds: dict[tuple[str, str, int], list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="big-tensors-") as tmp:
        repo = Path(tmp) / "repo"
        write_repository(repo)
        with ExitStack() as stack:
            baselines = {
                f"ours @ {ref}": stack.enter_context(baseline_tree(ref))
                for ref in args.baseline_ref
            }
            servers = Servers(repo, args.frontends, args.triton, max(args.mib) << 20, baselines)
            run_passes(args, servers, seconds, skipped)
    return seconds


def run_passes(
    args: argparse.Namespace,
    servers: Servers,
    seconds: dict[tuple[str, str, int], list[float]],
    skipped: list[int],
) -> None:
    """Every size and protocol on every server, alternating; always stops the servers."""
    try:
        servers.start()
        for mib in args.mib:
            if available_bytes() < MEMORY_FACTOR * (mib << 20):
                print(f"big-tensors: {mib} MiB skipped, too little memory", file=sys.stderr)
                skipped.append(mib)
                continue
            repeats = args.repeats or max(2, 256 // mib)
            for index, label in enumerate(servers.order(args.rounds)):
                for protocol in args.protocols:
                    url = servers.urls(label)[protocol]
                    got = round_trips(args.client_python, protocol, url, mib, repeats)
                    if not got["correct"]:
                        raise RuntimeError(f"{label} {protocol} {mib} MiB: wrong bytes back")
                    seconds.setdefault((label, protocol, mib), []).extend(got["seconds"])
                    print(
                        f"{label:>6} {protocol:>4} {mib:5d} MiB: "
                        f"{median(got['seconds']) * 1e3:8.1f} ms (pass {index + 1})",
                        file=sys.stderr,
                    )
    finally:
        servers.stop()


def report(
    args: argparse.Namespace,
    seconds: dict[tuple[str, str, int], list[float]],
    skipped: list[int],
) -> str:
    lines = [
        "# Large tensors through tritonclient: ours against Triton 2.51",
        "",
        f"Command: `{command(sys.argv[1:])}`  ",
        f"Commit {short_commit()}; {os.cpu_count()} CPUs; load average {loadavg()} at the end; "
        f"ours: the service with --frontends {args.frontends} and the REST gateway on its local "
        "socket (serve.sh's layout); Triton: the reference's start_triton.sh (CPU, python "
        "backend). A Python identity model (UINT8, the same model.py) on both; tritonclient "
        "2.73, one request at a time, each answer checked byte for byte; the servers "
        "alternate (ours, each baseline, Triton, then back); medians of the round trips.",
        "",
    ]
    bases = [f"ours @ {ref}" for ref in args.baseline_ref]
    head = ["size", "protocol", "ours ms", *(f"{b} ms" for b in bases), "Triton ms"]
    head += ["Triton / ours (≥ 1: ours faster)", *(f"{b} / ours" for b in bases)]
    rows = []
    for mib in args.mib:
        if mib in skipped:
            rows.append(
                [f"{mib} MiB", "", *[""] * (len(head) - 3), f"skipped: {MEMORY_FACTOR} x memory"]
            )
            continue
        for protocol in args.protocols:
            ours = median(seconds[("ours", protocol, mib)])
            theirs = median(seconds[("Triton", protocol, mib)])
            based = [median(seconds[(b, protocol, mib)]) for b in bases]
            rows.append(
                [
                    f"{mib} MiB",
                    protocol,
                    f"{ours * 1e3:.0f}",
                    *(f"{b * 1e3:.0f}" for b in based),
                    f"{theirs * 1e3:.0f}",
                    f"{theirs / ours:.2f}",
                    *(f"{b / ours:.2f}" for b in based),
                ]
            )
    lines += table(head, rows, "ll" + "r" * (len(head) - 2))
    return "\n".join(lines) + "\n"


@register
class BigTensors(Scenario):
    """16-1024 MiB identity round trips by tritonclient: ours against the real Triton."""

    name = "big-tensors"

    @staticmethod
    def add_cli_args(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--mib", type=int, nargs="+", default=[16, 64, 256])
        parser.add_argument("--protocols", nargs="+", default=["grpc", "http"])
        parser.add_argument("--repeats", type=int, default=0, help="0: 256 MiB worth, >= 2")
        # 1024 MiB: opt-in (some 15 minutes and 13.5 GB at its peak on 2 cores)
        parser.add_argument("--rounds", type=int, default=2, choices=[1, 2])
        parser.add_argument("--frontends", type=int, default=os.cpu_count() or 1)
        parser.add_argument("--triton", type=Path, default=REFERENCE)
        parser.add_argument(
            "--baseline-ref",
            action="append",
            default=[],
            help="also serve this git ref's service and gateway (git archive), alternating",
        )
        parser.add_argument("--client-python", type=Path, default=CLIENT_PYTHON)
        parser.add_argument("--quick", action="store_true", help="prints only")
        parser.set_defaults(quick_values={})
        parser.add_argument("--out", type=Path, default=None)

    @staticmethod
    def run(args: argparse.Namespace) -> int:
        for path, what in (
            (args.triton, "the reference Triton"),
            (args.client_python, "tritonclient"),
        ):
            if not path.exists():
                print(f"big-tensors: {what} not found at {path}", file=sys.stderr)
                return 2
        skipped: list[int] = []
        seconds = measure(args, skipped)
        out = None if args.quick else (args.out or RESULTS / "big_tensors.md")
        publish(report(args, seconds, skipped), out)
        return 0
