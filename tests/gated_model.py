"""A Python-backend identity model whose executions wait for the test to open a gate.

Queue tests need an instance that is busy for exactly as long as the test wants, without
sleeps: ``execute`` records that it started (a file in the model directory) and blocks
until the gate file exists. Standard library only, so server-side and client-side tests can
both use it.
"""

from __future__ import annotations

import re
import time
import urllib.request
from pathlib import Path
from typing import Protocol

__all__ = ["GatedModel", "wait_pending", "write_gated_model"]

_METRICS_LINE = re.compile(r"Started Metrics Service at [^\s:]+:(\d+)")

_MODEL_PY = """\
import os
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.dir = args["model_repository"]

    def execute(self, requests):
        count = len(os.listdir(os.path.join(self.dir, "started")))
        open(os.path.join(self.dir, "started", str(count)), "w").close()
        while not os.path.exists(os.path.join(self.dir, "gate")):
            time.sleep(0.005)
        responses = []
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", data)]))
        return responses
"""

_CONFIG = """\
name: "{name}"
backend: "python"
max_batch_size: {max_batch_size}
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] }} ]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
dynamic_batching {{ {batching} }}
"""


class GatedModel:
    def __init__(self, directory: Path) -> None:
        self.directory = directory

    @property
    def executions_started(self) -> int:
        return len(list((self.directory / "started").iterdir()))

    def wait_started(self, count: int = 1, timeout: float = 30.0) -> None:
        """Block until ``count`` executions have begun (each one is then held at the gate)."""
        deadline = time.monotonic() + timeout
        while self.executions_started < count:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.directory.name}: {count} executions never started")
            time.sleep(0.01)

    def open_gate(self) -> None:
        (self.directory / "gate").touch()


def write_gated_model(repo: Path, name: str, batching: str, max_batch_size: int = 8) -> GatedModel:
    """``repo/name`` with the gated model; ``batching`` is the dynamic_batching block's body."""
    directory = repo / name
    (directory / "1").mkdir(parents=True)
    (directory / "started").mkdir()
    (directory / "1" / "model.py").write_text(_MODEL_PY)
    (directory / "config.pbtxt").write_text(
        _CONFIG.format(name=name, max_batch_size=max_batch_size, batching=batching)
    )
    return GatedModel(directory)


class _Logged(Protocol):
    @property
    def log(self) -> str: ...


def wait_pending(server: _Logged, model: str, count: int, timeout: float = 30.0) -> None:
    """Until the server holds ``count`` requests of ``model`` (queued or executing), read
    from its ``nv_inference_pending_request_count`` gauge."""
    deadline = time.monotonic() + timeout
    # The metrics line follows the gRPC one that readiness waits for: it may come later.
    while (match := _METRICS_LINE.search(server.log)) is None:
        assert time.monotonic() < deadline, f"no metrics endpoint in the log:\n{server.log}"
        time.sleep(0.01)
    url = f"http://127.0.0.1:{match.group(1)}/metrics"
    sample = f'nv_inference_pending_request_count{{model="{model}",version="1"}} {count}'
    while True:
        with urllib.request.urlopen(url, timeout=10) as reply:
            if sample in reply.read().decode().splitlines():
                return
        if time.monotonic() > deadline:
            raise TimeoutError(f"{model}: never {count} pending requests")
        time.sleep(0.01)
