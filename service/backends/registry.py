"""Backend name -> implementation. Optional backends are imported only when a model asks."""

from __future__ import annotations

from .base import Backend

__all__ = ["BackendUnavailable", "get_backend"]


class BackendUnavailable(ValueError):
    """The config names a backend this installation cannot run."""


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
    if name == "tensorrt":
        raise BackendUnavailable(
            "backend 'tensorrt' is not available in this installation "
            "(install the 'gpu' extra on a machine with TensorRT)"
        )
    raise BackendUnavailable(f"unknown backend '{name}'")
