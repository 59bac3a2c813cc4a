"""``EXECUTION_ENV_PATH``: a Python model runs in its own environment, as in Triton's
python backend: a conda-pack archive (extracted by the server) or a folder, with
``$$TRITON_MODEL_DIRECTORY`` for the model's folder, activated by its ``bin/activate``.

The environment here is a venv of the server's base interpreter whose ``activate`` is
relocatable (as conda-pack's is) and which finds numpy through a ``.pth`` file: the model
reports ``sys.prefix``, which names the environment it really runs in.
"""

from __future__ import annotations

import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from integration_support import running_server
from server_process import SERVICE_PYTHON, ServerProcess
from tritonclient.utils import InferenceServerException

MODEL = """
import sys

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        prefix = np.array([sys.prefix.encode()], np.object_)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("PREFIX", prefix)]) for _ in requests]
"""

CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: 0
input [ {{ name: "IN" data_type: TYPE_FP32 dims: [ 1 ] }} ]
output [ {{ name: "PREFIX" data_type: TYPE_STRING dims: [ 1 ] }} ]
parameters {{ key: "EXECUTION_ENV_PATH" value: {{ string_value: "{path}" }} }}
"""

# conda-pack's activate finds its environment from where it lies; so does this one.
ACTIVATE = """
_env_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PATH="$_env_dir/bin:$PATH"
"""


def _server_python(code: str) -> str:
    run = subprocess.run([SERVICE_PYTHON, "-c", code], capture_output=True, text=True, check=True)
    return run.stdout.strip()


def _environment(folder: Path) -> Path:
    base = _server_python(
        "import sys; v = sys.version_info; print(f'{sys.base_prefix}/bin/python{v[0]}.{v[1]}')"
    )
    numpy_root = _server_python(
        "import numpy, os; print(os.path.dirname(os.path.dirname(numpy.__file__)))"
    )
    subprocess.run([base, "-m", "venv", "--without-pip", str(folder)], check=True)
    (folder / "bin" / "activate").write_text(ACTIVATE)
    site = next((folder / "lib").glob("python3*/site-packages"))
    (site / "server_packages.pth").write_text(numpy_root + "\n")
    return folder


def _model(repo: Path, name: str, path: str) -> Path:
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "1" / "model.py").write_text(MODEL)
    (repo / name / "config.pbtxt").write_text(CONFIG.format(name=name, path=path))
    return repo / name


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("envs")
    env = _environment(root / "env")
    repo = root / "repo"
    packed = _model(repo, "from_archive", "$$TRITON_MODEL_DIRECTORY/env.tar.gz")
    with tarfile.open(packed / "env.tar.gz", "w:gz") as tar:
        tar.add(env, arcname=".")
    _model(repo, "from_folder", str(env))
    _model(repo, "no_activate", str(root))  # a folder without bin/activate
    args = ["--model-control-mode", "explicit", "--load-model", "from_archive"]
    args += ["--load-model", "from_folder"]
    with running_server([repo], args) as proc:
        proc.env_folder = env  # type: ignore[attr-defined]
        yield proc


def _prefix(server: ServerProcess, model: str) -> str:
    tensor = grpcclient.InferInput("IN", [1], "FP32")
    tensor.set_data_from_numpy(np.zeros(1, np.float32))
    with grpcclient.InferenceServerClient(server.url) as client:
        return str(client.infer(model, [tensor]).as_numpy("PREFIX")[0].decode())


def test_a_folder_environment_runs_the_model(server: ServerProcess) -> None:
    assert Path(_prefix(server, "from_folder")) == server.env_folder  # type: ignore[attr-defined]


def test_an_archive_is_extracted_and_runs_the_model(server: ServerProcess) -> None:
    prefix = Path(_prefix(server, "from_archive"))
    assert prefix != server.env_folder  # type: ignore[attr-defined]
    assert (prefix / "bin" / "activate").is_file()
    assert "Using Python execution env " in server.log


def test_an_environment_without_activate_fails_the_load(server: ServerProcess) -> None:
    client = grpcclient.InferenceServerClient(server.url)
    with client, pytest.raises(InferenceServerException) as caught:
        client.load_model("no_activate")
    assert "The Python environment should contain an 'activate' script." in caught.value.message()
