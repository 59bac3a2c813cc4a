"""The ``gpu`` marker's rules (standard library and pytest only, for both environments).

A gpu-marked test runs only where an NVIDIA GPU is; elsewhere it is skipped with the
reason. ``GPU_TESTS=required`` (set on a GPU machine) turns every such skip, and every
missing GPU package, into a failure, so a GPU run cannot pass by skipping (docs/gpu.md).
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

__all__ = ["GPU_REQUIRED", "gpu_needs", "no_gpu_reason", "record"]

GPU_REQUIRED = os.environ.get("GPU_TESTS", "") == "required"
#: scripts/gpu_check.sh collects each gpu test's figure here for its summary table.
FIGURES = os.environ.get("GPU_CHECK_FIGURES", "")


def no_gpu_reason() -> str | None:
    """Why gpu tests cannot run here (None: nvidia-smi lists a GPU)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return "no NVIDIA GPU here (nvidia-smi not found): gpu tests run on a GPU machine"
    try:
        listed = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        return f"nvidia-smi failed: {exc}"
    return None if "GPU " in listed else "nvidia-smi lists no GPU"


def gpu_needs(ok: bool, reason: str) -> None:
    """Inside a gpu test: skip when a GPU package is missing (fail with GPU_TESTS=required)."""
    if ok:
        return
    if GPU_REQUIRED:
        pytest.fail(f"GPU_TESTS=required but {reason}")
    pytest.skip(reason)


def record(figure: str) -> None:
    """Note what a gpu test measured (a line in $GPU_CHECK_FIGURES; nothing when unset)."""
    if not FIGURES:
        return
    test = os.environ.get("PYTEST_CURRENT_TEST", "?").split(" ")[0]
    with open(FIGURES, "a", encoding="utf-8") as figures:
        figures.write(f"{test}\t{figure}\n")
