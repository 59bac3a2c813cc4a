"""Opening request-backend instances straight through the backend, and collecting what
they send, for the unit tests of the python and built-in backends.

The folders beside this file form a model repository (config.pbtxt + 1/model.py), so the
same models can also be served by a real server.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from google.protobuf import text_format
from proc_info import pid_alive, process_tree

from inference import model_config_pb2 as mc
from service.backends.base import BackendRequest, InstanceSpec
from service.backends.registry import get_backend
from service.core.loader import instance_specs
from service.errors import ErrorCode, ServerError

MODELS = Path(__file__).resolve().parent


@dataclass
class Response:
    outputs: dict[str, Any] | None
    error: str | None  # the message
    final: bool
    code: ErrorCode | None = None  # the error's class (INTERNAL for a plain message)


class Collector:
    """A thread-safe ResponseSender that records every response."""

    def __init__(self) -> None:
        self.responses: list[Response] = []
        self._lock = threading.Lock()
        self._final = threading.Event()
        self._cancelled = False
        self.arrived: list[float] = []

    def send(
        self,
        outputs: Mapping[str, Any] | None = None,
        error: str | ServerError | None = None,
        final: bool = False,
    ) -> None:
        code = None if error is None else ErrorCode.INTERNAL
        if isinstance(error, ServerError):
            error, code = error.message, error.code
        with self._lock:
            if self._final.is_set():
                raise AssertionError("a response arrived after the final one")
            copied = None if outputs is None else {k: np.array(v) for k, v in outputs.items()}
            self.responses.append(Response(copied, error, final, code))
            self.arrived.append(time.monotonic())
        if final:
            self._final.set()

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    def cancel(self) -> None:
        self._cancelled = True

    def wait(self, timeout: float = 20.0) -> Collector:
        assert self._final.wait(timeout), f"no final response within {timeout} s"
        return self

    @property
    def done(self) -> bool:
        return self._final.is_set()

    @property
    def outputs(self) -> list[dict[str, Any]]:
        return [r.outputs for r in self.responses if r.outputs]

    @property
    def only(self) -> Response:
        """The one response of a non-decoupled request."""
        assert len(self.responses) == 1, self.responses
        assert self.responses[0].final
        return self.responses[0]


def load_config(name: str, extra: str = "", **parameters: str) -> mc.ModelConfig:
    config = mc.ModelConfig()
    text_format.Parse((MODELS / name / "config.pbtxt").read_text(), config)
    text_format.Merge(extra, config)
    for key, value in parameters.items():
        config.parameters[key].string_value = value
    if config.backend == "python":
        config.default_model_filename = "model.py"
    return config


def open_instances(config: mc.ModelConfig, version: Path | None = None) -> list[Any]:
    """Every instance of the config's instance_group, opened as the loader does."""
    backend = get_backend(config.backend)
    path = version or MODELS / config.name / "1"
    return [backend.open(config, path, spec) for spec in instance_specs(config, cpu_count=2)]


def open_one(config: mc.ModelConfig, version: Path | None = None) -> Any:
    spec = InstanceSpec(f"{config.name}_0_0", "KIND_CPU", 0, 1)
    return get_backend(config.backend).open(config, version or MODELS / config.name / "1", spec)


def request(outputs: list[str] | None = None, **inputs: Any) -> BackendRequest:
    return BackendRequest(
        inputs={k: np.asarray(v) for k, v in inputs.items()}, requested_outputs=outputs or []
    )


def run(instance: Any, *requests: BackendRequest) -> list[Collector]:
    senders = [Collector() for _ in requests]
    instance.execute_requests(list(requests), senders)
    return senders


def wait_gone(pid: int, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not pid_alive(pid):
            return True
        time.sleep(0.02)
    return not pid_alive(pid)


def children_of(pid: int | None = None) -> set[int]:
    """The live children of ``pid`` (this process by default)."""
    pid = pid or os.getpid()
    return {child for child, parent in process_tree(pid).items() if parent == pid}


def write_model(root: Path, name: str, source: str, config_text: str = "") -> mc.ModelConfig:
    """A throw-away python model under ``root``; returns its config (version 1)."""
    version = root / name / "1"
    version.mkdir(parents=True, exist_ok=True)
    (version / "model.py").write_text(source)
    config = text_format.Parse(config_text, mc.ModelConfig())
    config.name, config.backend, config.default_model_filename = name, "python", "model.py"
    return config
