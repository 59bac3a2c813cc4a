"""Tensor instances that execute in worker processes of their own (issue 25).

With ``SERVICE_INSTANCE_WORKERS=1`` in the split layout (``--frontends N``, N > 0) each
ONNX Runtime instance, CPU or GPU, runs in a worker process: the engine's interpreter
keeps only the schedulers, and the model's threads never contend for its GIL. Not the
default yet: on 2 cores the hop per batch costs more than the contention it removes
(docs/decisions/030-instances-in-worker-processes.md). ``--frontends 0`` always keeps
instances in threads of its one process.
"""

from __future__ import annotations

from pathlib import Path

from inference import model_config_pb2 as mc

from ..base import Backend, InstanceSpec
from .instance import IsolatedInstance

__all__ = ["ISOLATED_BACKENDS", "IsolatedBackend", "IsolatedInstance"]

#: Backends whose instances run in worker processes in the split layout. Python models
#: have worker processes of their own; the built-in backends are a few lines of numpy.
ISOLATED_BACKENDS = frozenset({"onnxruntime", "pytorch", "openvino", "tensorflow"})


class IsolatedBackend:
    """``inner``'s instances, each opened in a new worker process."""

    worker_processes = True  # each instance's memory is its worker's

    def __init__(self, inner: Backend) -> None:
        self._inner = inner
        self.name = inner.name

    @property
    def supports_gpu(self) -> bool:
        return self._inner.supports_gpu

    def open(
        self, config: mc.ModelConfig, version_path: Path, spec: InstanceSpec
    ) -> IsolatedInstance:
        return IsolatedInstance(self.name, config, version_path, spec)
