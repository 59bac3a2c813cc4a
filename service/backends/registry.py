"""Backend name -> implementation. Optional backends are imported only when a model asks."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .base import Backend

if TYPE_CHECKING:
    from inference import model_config_pb2 as mc

__all__ = ["BackendUnavailable", "backend_for", "get_backend", "missing_extra"]


class BackendUnavailable(ValueError):
    """The config names a backend this installation cannot run."""


def missing_extra(backend: str, framework: str, extra: str, exc: ImportError) -> BackendUnavailable:
    """A framework backend whose package is not installed: the model's load fails with
    the extra that brings it (the base install stays lean: decision 046)."""
    return BackendUnavailable(
        f"backend '{backend}' is not available in this installation: {framework} is not "
        f"installed ({exc.name or exc}); install the '{extra}' extra "
        f"(pip install '.[{extra}]')"
    )


def backend_for(config: mc.ModelConfig) -> Backend:
    """The backend that serves ``config``: its ``backend``, except a PyTorch model on the
    PyTorch 2 python runtime (``runtime: "model.py"``), which the python backend runs
    (torch is imported by its workers only, so the server needs no torch for it)."""
    from .pytorch.python_runtime import PyTorchPythonRuntime, uses_python_runtime

    if uses_python_runtime(config):
        return PyTorchPythonRuntime()
    return get_backend(config.backend)


def get_backend(name: str) -> Backend:
    if name == "onnxruntime":
        from .onnxruntime import OnnxRuntimeBackend

        return OnnxRuntimeBackend()
    if name == "python":
        from .python.backend import PythonBackend

        return PythonBackend()
    if name in ("identity", "repeat", "square"):
        from .builtin import builtin_backend

        return builtin_backend(name)
    if name == "pytorch":
        try:
            from .pytorch.backend import PyTorchBackend
        except ImportError as exc:
            raise missing_extra(name, "PyTorch", "torch", exc) from exc
        return PyTorchBackend()
    if name == "openvino":
        try:
            from .openvino.backend import OpenVinoBackend
        except ImportError as exc:
            raise missing_extra(name, "OpenVINO", "openvino", exc) from exc
        return OpenVinoBackend()
    if name == "tensorflow":
        try:
            from .tensorflow.backend import TensorFlowBackend
        except ImportError as exc:
            raise missing_extra(name, "TensorFlow", "tensorflow", exc) from exc
        return TensorFlowBackend()
    if name == "tensorrt":
        raise BackendUnavailable(
            "backend 'tensorrt' is not available in this installation "
            "(install the 'gpu' extra on a machine with TensorRT)"
        )
    raise BackendUnavailable(f"unknown backend '{name}'")
