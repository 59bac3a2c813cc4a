"""A Python model's execute with both sides in one thread: our code's CPU without the hop.

``cost-budget`` charges a Python model's requests to the engine's instance thread and the
model's worker, wake-ups and all; ``worker-channel`` times the hop with them. This takes
the hop's wake-ups out: a real ``PythonInstance`` (the engine's side) runs
``execute_requests`` for one request of Triton's add_sub ``model.py``
(``tests/python_models/add_sub``), and the message it sends on the calls link is read and
run at once, in the same thread, by the worker's own ``Stub`` (its real code, on a
socketpair), whose answer the instance then reads as it would the worker's. What is left
is the CPU of our Python and its system calls: µs per execute for the engine's side, the
worker's, and the worker's steps (reading the message; unpacking and building the
``pb_utils`` requests; the model; checking its responses; encoding and sending them),
best of ``--rounds`` windows of ``--calls`` executes. ``--baseline-ref REF`` measures
REF's tree (``git archive``) too, alternating, in columns of its own (issue 37, item 4;
decision 066).

    PYTHONPATH=.:protos .venv/bin/python -m loadtest.python_model_phases --baseline-ref main
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

PHASES = ("engine", "worker", "w.recv", "w.requests", "w.model", "w.deliver", "w.respond")


def measure(tree: Path, rounds: int, calls: int) -> dict[str, float]:
    """µs per execute by phase, best of ``rounds``; ``service`` is whichever is on the path
    (the caller puts ``tree`` there), ``tree`` only gives the model file."""
    import socket
    import tempfile

    import numpy as np
    from google.protobuf import text_format

    from inference import model_config_pb2 as mc
    from service.backends.base import BackendRequest, InstanceSpec
    from service.backends.python import triton_python_backend_utils as pb_utils
    from service.backends.python.backend import PythonBackend
    from service.backends.python.config_json import config_to_json
    from service.backends.python.protocol import Channel
    from service.backends.python.stub import Stub

    sys.modules["triton_python_backend_utils"] = pb_utils
    model_file = tree / "tests" / "python_models" / "add_sub" / "1" / "model.py"
    config_text = (tree / "tests" / "python_models" / "add_sub" / "config.pbtxt").read_text()
    clock = time.perf_counter_ns
    spent = dict.fromkeys(PHASES, 0)

    def timed(owner: Any, name: str, phase: str) -> None:
        inner = getattr(owner, name)

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            start = clock()
            try:
                return inner(*args, **kwargs)
            finally:
                spent[phase] += clock() - start

        setattr(owner, name, wrapper)

    class Sender:
        cancelled = False
        outputs: Any = None

        def send(
            self, outputs: Any = None, error: Any = None, final: bool = False, **_: Any
        ) -> None:
            if error is not None:
                raise RuntimeError(str(error))
            self.outputs = outputs

    with tempfile.TemporaryDirectory() as folder:
        version = Path(folder) / "add_sub" / "1"
        version.mkdir(parents=True)
        (version / "model.py").write_text(model_file.read_text())
        config = text_format.Parse(config_text, mc.ModelConfig())
        instance = PythonBackend().open(
            config, version, InstanceSpec("add_sub_0", "KIND_CPU", 0, 1)
        )
        real = instance._worker
        engine_calls, worker_calls = socket.socketpair()
        engine_services, worker_services = socket.socketpair()
        link = Channel(engine_calls)
        stub_calls = Channel(worker_calls)
        stub = Stub(stub_calls, stub_calls.sibling(worker_services))
        stub.model = _model(model_file)
        stub.model.initialize({"model_config": config_to_json(config)})
        timed(stub, "_requests", "w.requests")
        timed(stub.calls, "unpack", "w.requests")
        timed(stub.model, "execute", "w.model")
        timed(stub, "_deliver", "w.deliver")
        timed(stub, "_send_responses", "w.respond")

        class InThread:
            """The worker's handle, with the worker run in the caller's thread."""

            channel = link.sibling(engine_services)
            calls = link
            pid = os.getpid()
            alive = True

            def send_call(self, message: tuple[Any, ...], fd: int | None = None) -> None:
                link.send(message, fd)
                start = clock()
                received, received_fd = stub_calls.recv()
                spent["w.recv"] += clock() - start
                stub._execute(received, received_fd)
                spent["worker"] += clock() - start

            def recv_call(self, timeout: float | None) -> Any:
                return link.recv()

            def send(self, message: tuple[Any, ...], fd: int | None = None) -> None:
                self.channel.send(message, fd)

        instance._worker = InThread()
        a = np.arange(16, dtype=np.float32).reshape(1, 16)
        request = BackendRequest({"INPUT0": a, "INPUT1": a}, [])
        sender = Sender()
        best: dict[str, float] = {}
        try:
            for window in range(rounds + 1):  # the first one warms up
                for phase in spent:
                    spent[phase] = 0
                start = clock()
                for _ in range(calls):
                    sender.outputs = None
                    instance.execute_requests([request], [sender])
                    if sender.outputs is None:
                        raise RuntimeError("the model did not answer")
                total = clock() - start
                if window == 0:
                    continue
                figures = {p: spent[p] / calls / 1000 for p in PHASES}
                figures["engine"] = (total - spent["worker"]) / calls / 1000
                best = figures if not best else {p: min(best[p], figures[p]) for p in PHASES}
        finally:
            instance._worker = real
            instance.close()
        return best


def _model(path: Path) -> Any:
    namespace: dict[str, Any] = {"__name__": "model"}
    exec(compile(path.read_text(), str(path), "exec"), namespace)
    return namespace["TritonPythonModel"]()


def _run_tree(tree: Path, rounds: int, calls: int) -> dict[str, float]:
    """``measure`` in a fresh interpreter that imports ``tree``'s ``service``."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree), str(tree / "protos")])}
    code = (
        "import json, sys, runpy; from pathlib import Path; "
        f"m = runpy.run_path({str(Path(__file__))!r}); "
        f"print(json.dumps(m['measure'](Path({str(tree)!r}), {rounds}, {calls})))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=tree, env=env, check=True, capture_output=True, text=True
    ).stdout
    return dict(json.loads(out.strip().splitlines()[-1]))


def main() -> None:
    from contextlib import ExitStack

    from loadtest import REPO_ROOT
    from loadtest.scenarios.cpu_bench import baseline_tree

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="windows per tree; best")
    parser.add_argument("--calls", type=int, default=20000, help="executes per window")
    parser.add_argument("--alternations", type=int, default=2, help="runs of each tree")
    parser.add_argument("--baseline-ref", help="also measure this git ref's tree")
    args = parser.parse_args()
    with ExitStack() as stack:
        trees = [("this tree", REPO_ROOT)]
        if args.baseline_ref:
            trees.append((args.baseline_ref, stack.enter_context(baseline_tree(args.baseline_ref))))
        results: dict[str, list[dict[str, float]]] = {label: [] for label, _ in trees}
        for _ in range(args.alternations):
            for label, tree in trees:
                results[label].append(_run_tree(tree, args.rounds, args.calls))
    labels = [label for label, _ in trees]
    print(
        f"load average {os.getloadavg()[0]:.2f}; "
        f"µs per execute, best of {args.rounds} x {args.calls}"
    )
    print(
        "| phase | "
        + " | ".join(f"{label} (run {i + 1})" for label in labels for i in range(args.alternations))
        + " |"
    )
    print("|---|" + "--:|" * (len(labels) * args.alternations))
    for phase in PHASES:
        cells = [f"{run[phase]:.1f}" for label in labels for run in results[label]]
        print(f"| {phase} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
