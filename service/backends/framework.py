"""What the framework backends (PyTorch, TensorFlow, OpenVINO) share when an instance opens:
the load failure's reason with Triton's code words, and the model file's place.

Their rules raise the project's ``ServerError`` (``InvalidArgument``, ``Internal``, ...);
a load failure's reason is text that reads as Triton's does ("Invalid argument: ...", the
words of its status code), so ``FrameworkBackend.open`` turns the one into the other once
for every backend. No framework is imported here: a backend's rules stay testable without
its extra.
"""

from __future__ import annotations

from pathlib import Path
from typing import Generic, TypeVar

from inference import model_config_pb2 as mc

from ..errors import ServerError, Unavailable, status_text
from .base import InstanceSpec

__all__ = ["FrameworkBackend", "load_error", "model_file"]

InstanceT = TypeVar("InstanceT")


def load_error(exc: ServerError) -> ValueError:
    """A rule's error as a load failure's reason, with Triton's code words."""
    return ValueError(status_text(exc))


def model_file(
    config: mc.ModelConfig, version_path: Path, default: str, spec: InstanceSpec, folder: bool
) -> Path:
    """The version's model file (``default_model_filename``, else the backend's default);
    Triton's text when it is missing. ``folder``: the model is a directory (SavedModel)."""
    path = version_path / (config.default_model_filename or default)
    if not (path.is_dir() if folder else path.is_file()):
        raise Unavailable(f"unable to find '{path}' for model instance '{spec.name}'")
    return path


class FrameworkBackend(Generic[InstanceT]):
    """``open`` runs the backend's ``_open`` and gives its rule errors as load reasons."""

    def open(self, config: mc.ModelConfig, version_path: Path, spec: InstanceSpec) -> InstanceT:
        try:
            return self._open(config, version_path, spec)
        except ServerError as exc:
            raise load_error(exc) from None

    def _open(self, config: mc.ModelConfig, version_path: Path, spec: InstanceSpec) -> InstanceT:
        raise NotImplementedError
