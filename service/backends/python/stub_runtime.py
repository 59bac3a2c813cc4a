"""Worker-side helpers: importing ``model.py`` the way Triton's stub does, describing a
model's exception, and never outliving the server."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

__all__ = ["describe_exception", "hard_exit", "import_model_class", "watch_parent"]


def import_model_class(model_path: str, backend_runtime: bool = False) -> Any:
    """``TritonPythonModel`` from the file; its version folder and model folder join
    ``sys.path`` (as in Triton), so a model can import modules kept beside it. A
    python-based backend's runtime (``backend_runtime``) adds only its own folder, as
    Triton's stub does for one."""
    path = Path(model_path)
    sys.path.append(str(path.parent))
    if not backend_runtime:
        sys.path.append(str(path.parent.parent))
    spec = importlib.util.spec_from_file_location("model", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import '{path.name}'")
    module = importlib.util.module_from_spec(spec)
    sys.modules["model"] = module
    spec.loader.exec_module(module)
    model_class = getattr(module, "TritonPythonModel", None)
    if model_class is None:
        raise AttributeError(f"'{path.name}' does not define class TritonPythonModel")
    if not callable(getattr(model_class, "execute", None)):
        raise AttributeError("TritonPythonModel does not define execute(requests)")
    return model_class


def describe_exception(exc: BaseException) -> str:
    """``Type: message``, plus where in the model file it was raised."""
    text = f"{type(exc).__name__}: {exc}"
    frames = traceback.extract_tb(exc.__traceback__)
    if frames:
        last = frames[-1]
        text += f" (at {Path(last.filename).name}:{last.lineno} in {last.name})"
    return text


def watch_parent(parent: int) -> None:
    """Exit once re-parented: the server is gone even if something holds our socket."""
    while True:
        time.sleep(1.0)
        if os.getppid() != parent:
            hard_exit(1)


def hard_exit(code: int) -> None:
    """Exit now, without waiting for the model's threads."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(code)
