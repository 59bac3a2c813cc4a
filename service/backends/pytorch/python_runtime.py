"""Triton's PyTorch 2 python runtime: ``backend: "pytorch"`` with ``runtime: "model.py"``.

Triton serves such a model as a *python-based backend*: its core runs the python backend
with the pytorch backend's own ``model.py`` (pytorch_backend r24.10, ``src/model.py``) as
the model file, and ``pb_utils.get_model_dir()`` names the model's version folder, where
the user's files are: a ``model.py`` holding a ``torch.nn.Module`` (optionally with its
``state_dict`` in ``model.pt``), run through ``torch.compile``, or a TorchScript
``model.pt``. This module does the same with the project's python backend and its own
runtime file, ``runtime/model.py``: each instance is a worker process that imports torch
(the server process does not), requests arrive as the python backend's lists, and the
runtime batches them itself, as Triton's does.
"""

from __future__ import annotations

from pathlib import Path

from inference import model_config_pb2 as mc

from ..python.backend import PythonBackend

__all__ = ["RUNTIME_FILE", "PyTorchPythonRuntime", "uses_python_runtime"]

#: Triton's kPythonFilename: the runtime value that selects a python-based backend.
PYTHON_RUNTIME = "model.py"
RUNTIME_FILE = Path(__file__).with_name("runtime") / PYTHON_RUNTIME


def uses_python_runtime(config: mc.ModelConfig) -> bool:
    """Whether the PyTorch model runs on the PyTorch 2 python runtime (Triton takes the
    libtorch runtime unless the config names ``model.py``)."""
    return config.backend == "pytorch" and config.runtime == PYTHON_RUNTIME


class PyTorchPythonRuntime(PythonBackend):
    """The python backend, importing ``runtime/model.py`` for every such model."""

    name = "pytorch"

    def _model_file(self, config: mc.ModelConfig, version_path: Path) -> Path:
        return RUNTIME_FILE
