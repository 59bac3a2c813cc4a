"""scripts/gpu_check.sh on a machine without a GPU, against a fake ``nvidia-smi`` and a fake
NVML: its own logic (arguments, the setup's wrapper and import checks, the steps' results,
the summary table and the exit status), so that the one script a lent GPU machine runs
first does not fail there for a reason a CPU machine could have shown. The GPU steps
themselves fail here, as they must (``GPU_TESTS=required``); which of them run is chosen
with ``--steps``."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gpu_check.sh"
CLIENT_SITES = sorted((ROOT / ".venv-client" / "lib").glob("python*/site-packages"))

_SMI = """#!/bin/sh
case "$*" in
  *query-gpu*) echo "Fake GPU, 0.0" ;;
  *) echo "GPU 0: Fake GPU (UUID: GPU-fake)" ;;
esac
"""
_NVML = """
def nvmlInit(): pass
def nvmlShutdown(): pass
def nvmlDeviceGetCount(): return 1
def nvmlDeviceGetHandleByIndex(index): return index
def nvmlDeviceGetUUID(handle): return "GPU-fake"
def nvmlDeviceGetName(handle): return "Fake GPU"
def nvmlDeviceGetCudaComputeCapability(handle): return (9, 0)
def nvmlDeviceGetComputeRunningProcesses(handle): return []
"""

needs_client = pytest.mark.skipif(
    not CLIENT_SITES, reason="the client environment (.venv-client) is not built here"
)


def _check(tmp_path: Path, *args: str, **env: str) -> tuple[int, str, str]:
    """Run the script with the fakes first on PATH and PYTHONPATH; (exit status, its
    output, summary.md)."""
    fakes = tmp_path / "fakes"
    (fakes / "bin").mkdir(parents=True)
    smi = fakes / "bin" / "nvidia-smi"
    smi.write_text(_SMI)
    smi.chmod(0o755)
    (fakes / "pynvml.py").write_text(_NVML)
    # The two targets the setup would fill from .whl/: here this machine's environments.
    site = tmp_path / "site"
    site.mkdir()
    (site / "server").symlink_to(sysconfig.get_paths()["purelib"])
    (site / "client").symlink_to(CLIENT_SITES[0])
    out = tmp_path / "out"
    environ = {
        **os.environ,
        "PATH": f"{fakes / 'bin'}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": str(fakes),
        "PYTHON": sys.executable,
        **env,
    }
    command = [str(SCRIPT), "--out", str(out), "--site", str(site), "--bundle", "none"]
    command += ["--wheels", str(tmp_path / "no-wheels"), *args]
    done = subprocess.run(
        command, env=environ, capture_output=True, text=True, timeout=300, cwd=ROOT
    )
    summary = (out / "summary.md").read_text() if (out / "summary.md").exists() else ""
    return done.returncode, done.stdout + done.stderr, summary


def _rows(summary: str) -> dict[str, str]:
    """step -> result, from the summary table."""
    rows = {}
    for line in summary.splitlines():
        cells = [c.strip() for c in line.strip("|").split(" | ")]
        if len(cells) >= 2 and cells[0] not in ("step", "---"):
            rows[cells[0]] = cells[1]
    return rows


@needs_client
def test_setup_and_skipped_steps_pass(tmp_path: Path) -> None:
    """The setup finds the (fake) GPU and every package the server imports; a step skipped
    for a reason it names (TensorRT absent, workers without the split layout) is not a
    failure, so the run exits 0."""
    code, output, summary = _check(
        tmp_path, "--steps", "tensorrt,bench_workers", BENCH_FRONTENDS="0"
    )
    assert code == 0, output
    rows = _rows(summary)
    assert rows["setup"] == "passed", output
    assert rows["tensorrt"].startswith("skipped: "), rows
    assert rows["bench_workers"] == (
        "skipped: instance workers need the split layout (BENCH_FRONTENDS > 0)"
    ), rows
    assert list(rows) == ["setup", "tensorrt", "bench_workers"], rows
    assert "# GPU check: Fake GPU" in summary
    for package in ("onnxruntime", "grpcio", "protobuf", "numpy", "ml_dtypes"):
        assert f"| {package} " in summary, summary  # the setup's versions line


@needs_client
def test_a_failed_step_fails_the_run_and_the_rest_still_run(tmp_path: Path) -> None:
    """No CUDA provider here: the benchmark refuses (exit 2) in both layouts, each step is
    reported failed, and the script exits non-zero after printing the whole table."""
    steps = "bench,bench_workers,realistic"
    code, output, summary = _check(tmp_path, "--steps", steps, "--bench", "quick")
    assert code != 0, output
    rows = _rows(summary)
    assert rows == {
        "setup": "passed",
        "bench": "failed (exit 2)",
        "bench_workers": "failed (exit 2)",
        "realistic": "failed (exit 2)",
    }, output
    assert "has no CUDA provider" in output


@needs_client
def test_no_gpu_stops_at_the_setup(tmp_path: Path) -> None:
    """NVML finding no device fails the setup, and no GPU step is started without it."""
    nvml = tmp_path / "nvml0"
    nvml.mkdir()
    (nvml / "pynvml.py").write_text(_NVML.replace("return 1", "return 0"))
    fakes = str(tmp_path / "fakes")
    code, output, summary = _check(tmp_path, PYTHONPATH=f"{nvml}{os.pathsep}{fakes}")
    assert code != 0, output
    assert _rows(summary) == {"setup": "failed (exit 1)"}, output
    assert "NVML finds no GPU" in output
    assert "setup failed; the other steps need it" in output


def _requirement_names(requirements: list[str]) -> set[str]:
    return {
        re.split(r"[<>=!~\[; ]", r, maxsplit=1)[0].lower().replace("_", "-") for r in requirements
    }


def test_the_carried_wheels_cover_the_server_dependencies() -> None:
    """scripts/gpu_wheels.sh downloads with ``--no-deps`` (the image's numpy and torch stay
    untouched), so its server list names each package itself: every runtime dependency of
    pyproject.toml is there, but numpy (the image's) and onnxruntime (the pruned bundle)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    script = (ROOT / "scripts" / "gpu_wheels.sh").read_text()
    command = re.search(r"^download \.whl/server (.*?)(?<!\\)\n", script, re.M | re.S)
    assert command is not None, "no 'download .whl/server' command in gpu_wheels.sh"
    carried = _requirement_names(re.findall(r'"([^"]+)"', command.group(1)))
    needed = _requirement_names(project["dependencies"]) - {"numpy", "onnxruntime"}
    assert needed <= carried, f"not carried to the GPU machine: {sorted(needed - carried)}"
    assert "pytest-asyncio" in carried  # the GPU tests' own
