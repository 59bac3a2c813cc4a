"""Counting a Python model's ``initialize`` / ``finalize`` calls from a test: the model
appends one byte per call to a file named for it in a folder (its config's ``count_dir``
parameter); ``Counts`` reads them. Shared by the instance-update tests."""

from __future__ import annotations

import time
from pathlib import Path

__all__ = ["COUNT_PRELUDE", "Counts"]

#: The head of such a model's ``model.py``: imports and ``_count(folder, kind)``.
COUNT_PRELUDE = """
import json
import os
import time

import triton_python_backend_utils as pb_utils


def _count(folder, kind):
    with open(os.path.join(folder, kind), "a") as f:
        f.write("x")
"""


class Counts:
    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def __call__(self, kind: str) -> int:
        path = self.folder / kind
        return len(path.read_text()) if path.exists() else 0

    def wait(self, kind: str, expected: int, timeout: float = 60.0) -> int:
        deadline = time.monotonic() + timeout
        while self(kind) < expected and time.monotonic() < deadline:
            time.sleep(0.05)
        return self(kind)
