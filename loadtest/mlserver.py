"""MLServer 1.7.1 as a third server beside ours and Triton in cpu-bench (issue 37).

It runs from its own virtual environment (never the project's: its pins, pydantic 2,
FastAPI, its grpcio, would fight ours), made on first use under ``MLSERVER_VENV`` (default
``~/.cache/loadtest/mlserver-1.7.1``), ~1 min, as the reference's setup.sh makes Triton's.
Models are ``mlserver_runtime.py`` (numpy add/sub and identity) behind MLServer's V2 gRPC
endpoint, package ``inference``: the same ModelInfer our client sends to ours.

Settings are MLServer's own defaults but three, each to match what ours and Triton run
with: ``debug: false`` (debug logs every request), ``metrics_endpoint: null`` (Triton's
metrics are off too), loopback. ``parallel_workers`` is MLServer's default, 1 (the model
in one inference worker process, what MLServer ships), unless ``--mlserver-workers`` says
otherwise. MLServer has no ModelStatistics: successes are counted by the runtime in the
process that runs ``predict`` and read through its ``served`` model.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import grpc
import numpy as np
from server_process import LoggedProcess

from inference import grpc_service_pb2 as pb
from inference import grpc_service_pb2_grpc as pb_grpc

VERSION = "1.7.1"
VENV = Path(
    os.environ.get("MLSERVER_VENV", Path.home() / ".cache" / "loadtest" / f"mlserver-{VERSION}")
)
RUNTIME = Path(__file__).with_name("mlserver_runtime.py")
SERVED = "served"  # the model that reports every other model's count
# uvloop 0.23's get_event_loop raises in a process with no running loop, which kills
# MLServer's inference workers at their start: the uvloop of MLServer 1.7.1's time.
PINS = ("uvloop==0.21.0",)
_INSTALLED = f".installed-mlserver-{VERSION}"  # written once pip has finished
_STARTED = re.compile(r"gRPC server running on http://[^\s:]+:(\d+)")


def ensure_venv(venv: Path = VENV) -> Path:
    """MLServer's ``mlserver`` command, installing it into ``venv`` first if needed."""
    exe = venv / "bin" / "mlserver"
    if (venv / _INSTALLED).exists() and exe.exists():
        return exe
    print(f"cpu-bench: installing MLServer {VERSION} into {venv} (~1 min)", file=sys.stderr)
    shutil.rmtree(venv, ignore_errors=True)  # a half-made one from an interrupted run
    base = getattr(sys, "_base_executable", sys.executable)  # not this project's venv
    subprocess.run([base, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q"]
    subprocess.run([*pip, f"mlserver=={VERSION}", *PINS], check=True)
    (venv / _INSTALLED).write_text(VERSION + "\n", encoding="utf-8")
    return exe


def repository(root: Path, models: dict[str, dict[str, object]], workers: int) -> Path:
    """``root`` as an MLServer folder: settings.json, the runtime module, one folder per
    model (``models``: name -> its model-settings.json beyond the name), and ``served``."""
    root.mkdir(parents=True)
    settings = {
        "debug": False, "metrics_endpoint": None, "host": "127.0.0.1",
        "parallel_workers": workers, "load_models_at_startup": True,
    }  # fmt: skip
    (root / "settings.json").write_text(json.dumps(settings), encoding="utf-8")
    shutil.copy(RUNTIME, root / RUNTIME.name)
    for name, extra in {**models, SERVED: runtime("Served")}.items():
        (root / name).mkdir()
        text = json.dumps({"name": name, **extra}, indent=1)
        (root / name / "model-settings.json").write_text(text, encoding="utf-8")
    return root


def runtime(cls: str, **extra: object) -> dict[str, object]:
    """A model-settings.json body for ``mlserver_runtime.<cls>``."""
    return {"implementation": f"{RUNTIME.stem}.{cls}", **extra}


class MLServerProcess(LoggedProcess):
    """``mlserver start ROOT`` on the given ports, ready once every model answers ready
    (MLServer opens its ports while it still loads the models)."""

    name = "mlserver"
    started = _STARTED

    def __init__(self, exe: Path, root: Path, grpc_port: int, http_port: int) -> None:
        # Its runtime module from ROOT (the inference worker is spawned with this
        # environment); its .metrics and .envs folders land in ROOT too.
        env = {"PYTHONPATH": str(root), "MLSERVER_GRPC_PORT": str(grpc_port)}
        env["MLSERVER_HTTP_PORT"] = str(http_port)
        # Its log goes to stdout, where LoggedProcess reads nothing: onto stderr (exec
        # keeps the pid, the server's own, for its CPU and SIGTERM).
        command = ["sh", "-c", 'exec "$0" start "$1" 1>&2', str(exe), str(root)]
        super().__init__(command, env=env, cwd=root)
        self.models = [p.parent.name for p in root.glob("*/model-settings.json")]

    def start(self, timeout: float = 60.0) -> MLServerProcess:
        deadline = time.monotonic() + timeout
        super().start(timeout)
        with grpc.insecure_channel(self.url) as channel:
            stub = pb_grpc.GRPCInferenceServiceStub(channel)
            for model in self.models:
                while not _ready(stub, model):
                    if not self.running or time.monotonic() > deadline:
                        self.kill()
                        raise RuntimeError(f"mlserver: {model} not ready:\n{self.log}")
                    time.sleep(0.1)
        return self


def _ready(stub: pb_grpc.GRPCInferenceServiceStub, model: str) -> bool:
    try:
        return bool(stub.ModelReady(pb.ModelReadyRequest(name=model), timeout=5).ready)
    except grpc.RpcError:  # not known yet: still loading
        return False


def successes(url: str, model: str) -> int:
    """Requests of ``model`` that MLServer's runtime answered, from its ``served`` model."""
    request = pb.ModelInferRequest(model_name=SERVED)
    request.inputs.add(name="ANY", datatype="INT32", shape=[1]).contents.int_contents.append(0)
    with grpc.insecure_channel(url) as channel:
        reply = pb_grpc.GRPCInferenceServiceStub(channel).ModelInfer(request, timeout=10)
    for at, output in enumerate(reply.outputs):
        if output.name == model:
            if reply.raw_output_contents:
                return int(np.frombuffer(reply.raw_output_contents[at], "<i8")[0])
            return int(output.contents.int64_contents[0])
    return 0
