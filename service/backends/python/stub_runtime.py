"""Worker-side helpers: importing ``model.py`` the way Triton's stub does, describing a
model's exception as Triton's stub does, and never outliving the server."""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
import time
import traceback
from pathlib import Path
from types import FrameType
from typing import Any

__all__ = [
    "StubError",
    "describe_exception",
    "hard_exit",
    "import_model_class",
    "watch_parent",
]

# Frames in the stub's own modules are not the model's, so a description leaves them
# out, as Triton's (whose stub is C++) has none: the stub's entry (stub.py and this file)
# ends the walk outward; the modules a model calls (pb_utils and what serves it) are
# skipped where the exception was raised inside them.
_HERE = Path(__file__).resolve().parent
_PACKAGE_DIRS = tuple({os.path.dirname(__file__) + os.sep, str(_HERE) + os.sep})
_STUB_FILES = frozenset({"stub.py", "stub_runtime.py"})


class StubError(Exception):
    """A check of the stub's own failed (the model returned the wrong thing): Triton's C++
    ``PythonBackendException``, whose text has neither a type nor a traceback."""


def import_model_class(model_path: str, backend_runtime: bool = False) -> Any:
    """``TritonPythonModel`` from the file, imported as Triton's stub imports it: the
    version folder and the model folder join ``sys.path`` and the file is the module
    ``<version>.<stem>`` (so ``from .helpers import x`` finds a file beside it, the
    version folder being a namespace package). A python-based backend's runtime
    (``backend_runtime``) adds only its own folder and is the module ``<stem>``. The
    import goes through ``__import__``, as the stub's ``PyImport_ImportModule`` does, so a
    failure's frames are the ones Triton lists."""
    path = Path(model_path)
    sys.path.append(str(path.parent))
    if backend_runtime:
        name = path.stem
    else:
        sys.path.append(str(path.parent.parent))
        name = f"{path.parent.name}.{path.stem}"
    importlib.invalidate_caches()
    __import__(name)
    module = sys.modules[name]
    # Python's own AttributeError text, as Triton's (an ``execute`` is asked for per call)
    return module.TritonPythonModel


def describe_exception(exc: BaseException) -> str:
    """The text Triton's stub gives an exception: a check of its own (``StubError``) is
    its message alone; anything the model raised is pybind11's ``error_already_set``
    text, ``Type: message`` and ``At:`` with the model's frames, innermost first, each
    ``  file(line): function``. Those frames are pybind11's walk from where the exception
    was raised back through the callers (``f_back``), less the stub's own frames: at the
    inner end (a ``pb_utils`` call that raised) and from the first one met on the way out
    (where the stub called the model; Triton's stub is C++, so its walk ends there);
    an exception raised by the stub itself has no model frames. A
    coroutine's frame has no caller once it has ended, so an ``async def execute`` shows
    its own frames only, as in Triton."""
    if isinstance(exc, StubError):
        return str(exc)
    message = str(exc)
    text = f"{type(exc).__name__}: {message if message else '<EMPTY MESSAGE>'}"
    frame: FrameType | None = None
    for inner, _ in traceback.walk_tb(exc.__traceback__):
        frame = inner
    lines: list[str] = []
    while frame is not None:
        filename = frame.f_code.co_filename
        if filename.startswith(_PACKAGE_DIRS):
            if lines or os.path.basename(filename) in _STUB_FILES:
                break
        else:
            lines.append(f"  {filename}({frame.f_lineno}): {frame.f_code.co_name}\n")
        frame = frame.f_back
    if lines:
        text += "\n\nAt:\n" + "".join(lines)
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
