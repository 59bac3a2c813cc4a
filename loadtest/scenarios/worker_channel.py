"""The process hop to a worker: our channel against a bare socketpair ping-pong.

Three figures per concurrency, each a round trip between this process and a child:

- ``socketpair``: the floor. A child echoes 64-byte messages on a socketpair; one
  thread per concurrent caller writes and blocks for the echo (one pair per caller).
- ``channel``: our worker protocol's framing alone (``protocol.Channel``: pickled
  envelope, length header, buffered reads) on the same kind of pair, echoed by a child
  that runs the same ``Channel``.
- ``python model``: a whole ``execute`` through ``PythonInstance`` (the engine's side of a
  Python model) to a worker running Triton's add_sub ``model.py``: requests packed, sent
  on the calls link, run, answered, handed to a ``ResponseSender``.

Wall time per round trip at c=1 and CPU per round trip (this process's and the child's,
from /proc) at every concurrency: what the hop costs beside what it waits.

    .venv/bin/python -m loadtest worker-channel [--seconds 3] [--concurrency 1 4]
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from loadtest import RESULTS
from loadtest.metrics import process_cpu_seconds
from loadtest.report import publish, table
from loadtest.scenario import Scenario, register

_ECHO = textwrap.dedent(
    """
    import os, socket, sys
    fds = [int(fd) for fd in sys.argv[2].split(",")]
    if sys.argv[1] == "raw":
        def serve(fd):
            sock = socket.socket(fileno=fd)
            while True:
                data = sock.recv(65536)
                if not data:
                    os._exit(0)
                sock.sendall(data)
    else:
        from service.backends.python.protocol import Channel
        def serve(fd):
            channel = Channel(socket.socket(fileno=fd))
            while True:
                try:
                    message, _ = channel.recv()
                except EOFError:
                    os._exit(0)
                channel.send(message)
    import threading
    for fd in fds[1:]:
        threading.Thread(target=serve, args=(fd,), daemon=True).start()
    serve(fds[0])
    """
)

_MODEL = textwrap.dedent(
    """
    import triton_python_backend_utils as pb_utils

    class TritonPythonModel:
        def execute(self, requests):
            responses = []
            for request in requests:
                a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
                b = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
                responses.append(pb_utils.InferenceResponse([
                    pb_utils.Tensor("OUTPUT0", a + b), pb_utils.Tensor("OUTPUT1", a - b)]))
            return responses
    """
)

_CONFIG = """
name: "add_sub_py"
backend: "python"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] },
        { name: "INPUT1" data_type: TYPE_FP32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] },
         { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 16 ] } ]
"""


def _cpu_seconds(pids: list[int]) -> float:
    return sum(process_cpu_seconds(pid) or 0.0 for pid in pids)


def _drive(
    calls: list[Callable[[], None]], seconds: float, pids: list[int]
) -> tuple[int, float, float]:
    """Run each call in its own thread for ``seconds``: (round trips, wall, CPU)."""
    for call in calls:  # warm up
        call()
    cpu0 = _cpu_seconds(pids)
    start = time.perf_counter()
    count = calls_in_threads(calls, seconds)
    wall = time.perf_counter() - start
    cpu = _cpu_seconds(pids) - cpu0
    return count, wall, cpu


def calls_in_threads(calls: list[Callable[[], None]], seconds: float) -> int:
    """Each call again and again in its own thread for ``seconds`` (the last ones
    finish after it): how many calls returned."""
    stop = threading.Event()
    counts = [0] * len(calls)

    def loop(index: int, call: Callable[[], None]) -> None:
        while not stop.is_set():
            call()
            counts[index] += 1

    threads = [threading.Thread(target=loop, args=(i, c)) for i, c in enumerate(calls)]
    for thread in threads:
        thread.start()
    time.sleep(seconds)
    stop.set()
    for thread in threads:
        thread.join()
    return sum(counts)


def _echo_child(kind: str, pairs: int) -> tuple[subprocess.Popen[bytes], list[socket.socket]]:
    ours, theirs = zip(*(socket.socketpair() for _ in range(pairs)), strict=True)
    fds = [s.fileno() for s in theirs]
    child = subprocess.Popen(
        [sys.executable, "-c", _ECHO, kind, ",".join(map(str, fds))], pass_fds=fds
    )
    for sock in theirs:
        sock.close()
    return child, list(ours)


def _socketpair_calls(socks: list[socket.socket]) -> list[Callable[[], None]]:
    payload = b"x" * 64

    def make(sock: socket.socket) -> Callable[[], None]:
        def call() -> None:
            sock.sendall(payload)
            sock.recv(65536)

        return call

    return [make(s) for s in socks]


def _channel_calls(socks: list[socket.socket]) -> list[Callable[[], None]]:
    from service.backends.python.protocol import Channel

    def make(sock: socket.socket) -> Callable[[], None]:
        channel = Channel(sock)
        message: tuple[Any, ...] = ("responses", 1, [(0, [], None, True)], None, True, [])

        def call() -> None:
            channel.send(message)
            channel.recv()

        return call

    return [make(s) for s in socks]


class _Sender:
    __slots__ = ("outputs",)

    cancelled = False

    def __init__(self) -> None:
        self.outputs: Any = None

    def send(self, outputs: Any = None, error: Any = None, final: bool = False, **_: Any) -> None:
        if error is not None:
            raise RuntimeError(str(error))
        self.outputs = outputs


def _model_instances(folder: Path, count: int) -> list[Any]:
    from google.protobuf import text_format

    from inference import model_config_pb2 as mc
    from service.backends.base import InstanceSpec
    from service.backends.python.backend import PythonBackend

    version = folder / "add_sub_py" / "1"
    version.mkdir(parents=True)
    (version / "model.py").write_text(_MODEL)
    instances = []
    for index in range(count):
        config = text_format.Parse(_CONFIG, mc.ModelConfig())
        spec = InstanceSpec(f"add_sub_py_0_{index}", "KIND_CPU", 0, 1)
        instances.append(PythonBackend().open(config, version, spec))
    return instances


def _model_calls(instances: list[Any]) -> list[Callable[[], None]]:
    from service.backends.base import BackendRequest

    a = np.arange(16, dtype=np.float32)

    def make(instance: Any) -> Callable[[], None]:
        def call() -> None:
            request = BackendRequest({"INPUT0": a, "INPUT1": a}, [])
            sender = _Sender()
            instance.execute_requests([request], [sender])
            assert sender.outputs is not None

        return call

    return [make(i) for i in instances]


@register
class WorkerChannel(Scenario):
    """The worker hop: our channel and a Python model's execute against a socketpair."""

    name = "worker-channel"

    @staticmethod
    def add_cli_args(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--seconds", type=float, default=3.0)
        parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4])
        parser.add_argument("--out", type=Path, default=RESULTS / "worker_channel.md")

    @staticmethod
    def run(args: argparse.Namespace) -> int:
        rows: list[list[object]] = []
        me = os.getpid()
        for concurrency in args.concurrency:
            for kind in ("socketpair", "channel"):
                child, socks = _echo_child("raw" if kind == "socketpair" else "framed", concurrency)
                try:
                    make = _socketpair_calls if kind == "socketpair" else _channel_calls
                    n, wall, cpu = _drive(make(socks), args.seconds, [me, child.pid])
                finally:
                    for sock in socks:
                        sock.close()
                    child.wait(10)
                rows.append(_row(kind, concurrency, n, wall, cpu))
            with tempfile.TemporaryDirectory() as folder:
                instances = _model_instances(Path(folder), concurrency)
                try:
                    pids = [me, *(i.worker_pid for i in instances)]
                    n, wall, cpu = _drive(_model_calls(instances), args.seconds, pids)
                finally:
                    for instance in instances:
                        instance.close()
                rows.append(_row("python model execute", concurrency, n, wall, cpu))
        load = os.getloadavg()[0]
        lines = [
            "# The worker hop against a bare socketpair",
            "",
            f"Command: `.venv/bin/python -m loadtest {' '.join(sys.argv[1:])}`  ",
            f"{os.cpu_count()} CPUs; load average {load:.2f} at the end; "
            f"{args.seconds:g} s per row.",
            "",
            "Wall time per round trip at one caller; CPU (this process and the child, "
            "user + system) per round trip at every concurrency.",
            "",
            *table(
                ["hop", "callers", "round trips/s", "wall µs per trip", "CPU µs per trip"],
                rows,
                "lrrrr",
            ),
        ]
        publish("\n".join(lines) + "\n", args.out)
        return 0


def _row(kind: str, concurrency: int, n: int, wall: float, cpu: float) -> list[object]:
    per_trip = 1e6 * wall / max(n, 1) * concurrency
    return [
        kind,
        concurrency,
        f"{n / wall:,.0f}",
        f"{per_trip:.0f}" if concurrency == 1 else "",
        f"{1e6 * cpu / max(n, 1):.0f}",
    ]
