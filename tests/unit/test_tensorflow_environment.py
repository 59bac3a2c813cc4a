"""TensorFlow's environment defaults (decision 062): the backend imports TensorFlow with its
Eigen kernels, oneDNN's off, unless the environment already says. TensorFlow reads the
switch once, at its import, so each case is a fresh interpreter of the server's Python
(the one with TensorFlow), run in this tree."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from framework_support import need_framework
from server_process import SERVICE_PYTHON

REPO_ROOT = Path(__file__).resolve().parents[2]
# TensorFlow's own answer, after the backend module (and so TensorFlow) is imported.
PROBE = (
    "import service.backends.tensorflow.backend\n"
    "from tensorflow.python.util import _pywrap_util_port as port\n"
    "print('onednn', port.IsMklEnabled())\n"
)


def _backend_import(setting: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "TF_ENABLE_ONEDNN_OPTS"}
    if setting is not None:
        env["TF_ENABLE_ONEDNN_OPTS"] = setting
    done = subprocess.run(
        [SERVICE_PYTHON, "-c", PROBE],
        cwd=REPO_ROOT,  # `service` is this tree's
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def test_backend_imports_tensorflow_without_onednn_unless_told() -> None:
    need_framework("tensorflow", "tensorflow")
    default = _backend_import(None)
    assert default.stdout.split()[-2:] == ["onednn", "False"]
    # TensorFlow's notice at import ("oneDNN custom operations are on") is gone with it.
    assert "oneDNN custom operations" not in default.stderr
    # The operator's own setting wins (os.environ.setdefault).
    assert _backend_import("1").stdout.split()[-2:] == ["onednn", "True"]
