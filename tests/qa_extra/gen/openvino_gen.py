"""Runs one of Triton's qa generators with ``--openvino`` under an OpenVINO that still has nGraph.

The runner starts every generator as ``<gen python> <args>`` in ``qa/common``; the OpenVINO
repositories of ``tests/qa_extra/openvino.py`` put this file first in those args, so the
generator named after it (``gen_qa_models.py --openvino ...``, unchanged) is exec'd by the
Python of a venv that holds Triton's own generation pins (``requirements-openvino-gen.txt``:
openvino 2023.3.0, the last line with ``ngraph`` and ``openvino.inference_engine``). The
server keeps the current OpenVINO and reads the IR files (v11) these write.

The venv is built once under ``$TMPDIR`` (keyed by the requirements' hash), or named by
``TRITON_QA_GEN_OPENVINO_PYTHON``. run.sh starts the runner inside a network namespace
without network, so build it before a run: ``python3 tests/qa_extra/gen/openvino_gen.py
--build`` (with the same ``TMPDIR``). Only the standard library here: this runs under whichever
Python the runner's generator venv has.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REQUIREMENTS = Path(__file__).with_name("requirements-openvino-gen.txt")


def generation_python() -> str:
    """The Python of the nGraph-era venv, built on first use."""
    named = os.environ.get("TRITON_QA_GEN_OPENVINO_PYTHON")
    if named:
        return named
    digest = hashlib.sha1(REQUIREMENTS.read_bytes()).hexdigest()[:12]
    venv = Path(tempfile.gettempdir()) / "triton-qa-gen-openvino-venv"
    python = venv / "bin" / "python"
    stamp = venv / f".stamp-{digest}"
    if not stamp.exists():
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
        pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
        done = subprocess.run([*pip, "-r", str(REQUIREMENTS)], capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(
                f"installing {REQUIREMENTS.name} into {venv} failed (openvino 2023.3 has wheels "
                f"for CPython 3.8-3.11; this is {sys.version.split()[0]}; inside run.sh's network "
                f"namespace pip reaches nothing: run 'openvino_gen.py --build' before run.sh):\n"
                f"{done.stderr[-3000:]}"
            )
        stamp.touch()
    return str(python)


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit("usage: openvino_gen.py --build | <qa/common generator> [args...]")
    python = generation_python()
    if sys.argv[1] == "--build":
        print(python)
        return
    os.execv(python, [python, *sys.argv[1:]])


if __name__ == "__main__":
    main()
