"""Gate for the tests of framework backends (standard library and pytest only).

The server's Python must have the framework (the ``torch`` extra, ...). scripts/test.sh
installs the extras and sets ``FRAMEWORK_TESTS=required``: there a missing framework
fails the test instead of skipping it, so CI cannot pass by skipping (decision 046).
Elsewhere (a lean install) the tests skip, saying which extra they need.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from pathlib import Path

import pytest
from server_process import SERVICE_PYTHON

__all__ = ["FRAMEWORKS_REQUIRED", "make_models", "need_framework"]

FRAMEWORKS_REQUIRED = os.environ.get("FRAMEWORK_TESTS", "") == "required"
_MAKERS = Path(__file__).resolve().parent / "framework_models"


@functools.cache
def _importable(module: str) -> bool:
    done = subprocess.run([SERVICE_PYTHON, "-c", f"import {module}"], capture_output=True)
    return done.returncode == 0


def need_framework(module: str, extra: str) -> None:
    """Skip (fail under FRAMEWORK_TESTS=required) unless the server's Python has it."""
    if _importable(module):
        return
    reason = f"the server's Python lacks {module} (pip install '.[{extra}]')"
    if FRAMEWORKS_REQUIRED:
        pytest.fail(f"FRAMEWORK_TESTS=required but {reason}")
    pytest.skip(reason)


def make_models(maker: str, root: Path, *names: str) -> None:
    """Write models with tests/framework_models/<maker>.py, run by the server's Python
    (the one with the framework; the test client's venv has none)."""
    script = _MAKERS / f"{maker}.py"
    done = subprocess.run(
        [SERVICE_PYTHON, str(script), str(root), *names], capture_output=True, text=True
    )
    if done.returncode != 0:
        sys.stderr.write(done.stderr)
        raise RuntimeError(f"{script.name} failed: {done.stderr[-2000:]}")
