"""Measures what running Python models in worker processes costs and buys.

    .venv/bin/python -m loadtest python-backend-bench [--reps N] [--calls N]

Compares, for an identity model (``OUTPUT0 = INPUT0``), one request per execution:
``thread``, the model called in this process (what an in-process design would do: build
pb_utils requests, call ``execute``, collect outputs), ``worker``, the worker process with
tensors over 64 KiB in shared memory (the shipped design), and ``pipe``, the same worker
with every tensor pickled through the socket. Then parallelism: two instances of a
CPU-bound pure-Python model, driven by two threads at once, in-process vs in workers.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from inference import model_config_pb2 as mc
from loadtest.scenario import Scenario, register
from service.backends.base import Array, BackendRequest, InstanceSpec
from service.backends.python import triton_python_backend_utils as pb_utils
from service.backends.python.backend import PythonBackend

IDENTITY = """
import triton_python_backend_utils as pb_utils
class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0",
                pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())]) for r in requests]
"""
SPIN = """
import triton_python_backend_utils as pb_utils
import numpy as np
class TritonPythonModel:
    def execute(self, requests):
        total = 0
        for i in range(400_000):
            total += i % 7
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", np.array([total]))])
                for r in requests]
"""


class Collector:
    cancelled = False

    def __init__(self) -> None:
        self.outputs: Mapping[str, Array] | None = None
        self.error: str | None = None

    def send(
        self,
        outputs: Mapping[str, Array] | None = None,
        error: str | None = None,
        final: bool = False,
    ) -> None:
        self.outputs, self.error = outputs, error


class InProcess:
    """The model called directly in this process, as a thread-based backend would."""

    def __init__(self, path: Path) -> None:
        sys.modules["triton_python_backend_utils"] = pb_utils
        spec = importlib.util.spec_from_file_location(f"bench_{path.parent.parent.name}", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        self.model = module.TritonPythonModel()
        self._lock = threading.Lock()

    def execute_requests(self, requests: list[BackendRequest], senders: list[Collector]) -> None:
        wrapped = [
            pb_utils.InferenceRequest([pb_utils.Tensor(n, a) for n, a in r.inputs.items()])
            for r in requests
        ]
        for response, sender in zip(self.model.execute(wrapped), senders, strict=True):
            sender.send({t.name(): t.as_numpy() for t in response.output_tensors()}, final=True)


def _model(root: Path, name: str, source: str, **parameters: str) -> tuple[mc.ModelConfig, Path]:
    (root / name / "1").mkdir(parents=True)
    (root / name / "1" / "model.py").write_text(source)
    config = mc.ModelConfig(name=name, backend="python", default_model_filename="model.py")
    for key, value in parameters.items():
        config.parameters[key].string_value = value
    return config, root / name / "1"


def _time(run: Callable[[], None], reps: int) -> float:
    run()  # warm up
    samples = []
    for _ in range(reps):
        start = time.perf_counter()
        run()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def latency(root: Path, reps: int) -> None:
    config, path = _model(root, "identity", IDENTITY)
    pipe_config, _ = _model(root, "identity_pipe", IDENTITY, inline_tensor_limit_bytes=str(1 << 40))
    spec = InstanceSpec("bench_0", "KIND_CPU", 0, 1)
    runners: dict[str, Any] = {
        "thread": InProcess(path / "model.py"),
        "worker": PythonBackend().open(config, path, spec),
        "pipe": PythonBackend().open(pipe_config, path, spec),
    }
    print(f"{'tensor':>10} " + " ".join(f"{k + ' ms':>12}" for k in runners))
    for size in (16, 64 << 10, 1 << 20, 16 << 20, 64 << 20):
        request = BackendRequest({"INPUT0": np.ones(size // 4, np.float32)}, ["OUTPUT0"])
        row = []
        for runner in runners.values():

            def run(runner: Any = runner, request: Any = request, size: int = size) -> None:
                sink = Collector()
                runner.execute_requests([request], [sink])
                assert sink.outputs is not None and sink.outputs["OUTPUT0"].nbytes == size

            row.append(_time(run, reps if size < (16 << 20) else max(3, reps // 20)) * 1000)
        print(f"{_fmt(size):>10} " + " ".join(f"{v:12.3f}" for v in row))
    for runner in runners.values():
        if hasattr(runner, "close"):
            runner.close()


def parallel(root: Path, calls: int) -> None:
    config, path = _model(root, "spin", SPIN)
    spec = InstanceSpec("spin_0", "KIND_CPU", 0, 1)
    request = BackendRequest({"INPUT0": np.ones(1, np.float32)}, ["OUTPUT0"])
    makers: list[tuple[str, Callable[[], Any]]] = [
        ("thread", lambda: InProcess(path / "model.py")),
        ("worker", lambda: PythonBackend().open(config, path, spec)),
    ]
    for label, make in makers:
        instances = [make(), make()]

        def drive(instance: Any) -> None:
            for _ in range(calls):
                instance.execute_requests([request], [Collector()])

        drive(instances[0])  # warm up
        start = time.perf_counter()
        drive(instances[0])
        drive(instances[0])
        serial = time.perf_counter() - start
        threads = [threading.Thread(target=drive, args=(i,)) for i in instances]
        start = time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        wall = time.perf_counter() - start
        print(
            f"{label}: {2 * calls} executions on one instance {serial:.2f} s, "
            f"on two instances at once {wall:.2f} s: speed-up {serial / wall:.2f}x"
        )
        for instance in instances:
            if hasattr(instance, "close"):
                instance.close()


def _fmt(size: int) -> str:
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale:
            return f"{size // scale} {unit}"
    return f"{size} B"


@register
class PythonBackendBench(Scenario):
    """Python models: in-process vs worker processes (latency by size, parallelism)."""

    name = "python-backend-bench"

    @staticmethod
    def add_cli_args(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--reps", type=int, default=200)
        parser.add_argument("--calls", type=int, default=10)

    @staticmethod
    def run(args: argparse.Namespace) -> int:
        with tempfile.TemporaryDirectory() as tmp:
            latency(Path(tmp), args.reps)
            parallel(Path(tmp), args.calls)
        return 0
