"""The PyTorch 2 python runtime (``backend: "pytorch"``, ``runtime: "model.py"``) through
tritonclient, on one server: an ``nn.Module`` in ``model.py`` without and with its
``state_dict`` (``model.pt``), dynamic batching gathered and scattered by the runtime, a
TorchScript ``model.pt`` on KIND_MODEL, the log lines L0_pytorch_python_runtime greps, and
the runtime's load errors. Models: tests/framework_models/torch_runtime_models.py.
"""

from __future__ import annotations

import concurrent.futures
import json
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from framework_support import make_models, need_framework
from integration_support import add_sub_inputs, infer_input, running_server


@pytest.fixture
def _torch() -> None:
    need_framework("torch", "torch")


_RUNTIME = 'backend: "pytorch"\nruntime: "model.py"\n'
_IO = (
    'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }, '
    '{ name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
    'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
)


def _broken(root: Path, name: str, extra: str = "", model_py: str | None = None) -> None:
    (root / name / "1").mkdir(parents=True)
    (root / name / "config.pbtxt").write_text(f'name: "{name}"\n{_RUNTIME}{_IO}{extra}')
    if model_py is not None:
        (root / name / "1" / "model.py").write_text(model_py)


def _reasons(client: grpcclient.InferenceServerClient) -> dict[str, str]:
    return {m.name: str(m.reason) for m in client.get_model_repository_index().models}


@pytest.mark.usefixtures("_torch")
def test_python_runtime_serves_modules_and_torchscript(tmp_path: Path) -> None:
    make_models("torch_runtime_models", tmp_path)
    resnet = tmp_path / "resnet50_libtorch" / "config.pbtxt"  # test.sh's edits
    lines = [line for line in resnet.read_text().splitlines() if "platform" not in line]
    resnet.write_text("\n".join(lines) + f"\n{_RUNTIME}instance_group: [{{ kind: KIND_MODEL }}]\n")
    data = json.loads((tmp_path / "neuralnet" / "1" / "test_data.json").read_text())
    _broken(tmp_path, "no_file")
    _broken(
        tmp_path,
        "model_parameter",
        'parameters: { key: "TORCH_COMPILE_OPTIONAL_PARAMETERS" '
        'value: { string_value: "{\\"model\\": 1}" } }\n',
        model_py="import torch\n\nclass M(torch.nn.Module):\n    pass\n",
    )
    _broken(tmp_path, "no_module", model_py="class NotAModule:\n    pass\n")
    with (
        running_server([tmp_path], ["--log-verbose=1", "--exit-on-error=false"]) as server,
        grpcclient.InferenceServerClient(server.url) as client,
    ):
        a = np.array([1.0, 2.0, 3.0, 4.0], dtype=np.float32)
        b = np.array([0.5, 0.5, 0.5, 0.5], dtype=np.float32)
        result = client.infer("addsub", add_sub_inputs(a, b))
        np.testing.assert_allclose(result.as_numpy("OUTPUT0"), a + b)
        np.testing.assert_allclose(result.as_numpy("OUTPUT1"), a - b)

        inputs = np.array(data["input_data"], dtype=np.float32)
        labels = np.array(data["labels"], dtype=np.float32)

        def neuralnet(rows: slice) -> np.ndarray:
            out = client.infer("neuralnet", [infer_input("INPUT", inputs[rows], "FP32")])
            return out.as_numpy("OUTPUT").max(axis=1)

        np.testing.assert_allclose(neuralnet(slice(0, 4)), labels[0:4], atol=1e-3)
        with concurrent.futures.ThreadPoolExecutor(8) as pool:  # requests of 1 to 3 rows
            parts = [slice(i, i + 1 + i % 3) for i in range(8)]
            for rows, got in zip(parts, pool.map(neuralnet, parts), strict=True):
                np.testing.assert_allclose(got, labels[rows], atol=1e-3)

        x = np.array([[0.5, -1.0, 2.0], [3.0, 0.0, -4.5]], dtype=np.float32)
        out = client.infer("resnet50_libtorch", [infer_input("INPUT__0", x, "FP32")])
        np.testing.assert_allclose(out.as_numpy("OUTPUT__0"), x * 2 + 1)
        reasons = _reasons(client)
    assert "No model found in" in reasons["no_file"], reasons["no_file"]
    assert "['model.py', 'model.pt']" in reasons["no_file"]
    assert "'model' is not an optional parameter for 'torch.compile'" in reasons["model_parameter"]
    assert "Cannot find a subclass of torch.nn.Module" in reasons["no_module"]
    for line in (
        "Loading 'resnet50_libtorch' as TorchScript",
        "Torch parallelism settings for 'addsub': NUM_THREADS = 1; NUM_INTEROP_THREADS = 1;",
        "Torch parallelism settings for 'neuralnet': NUM_THREADS = 4; NUM_INTEROP_THREADS = 2;",
        "'torch.compile' optional parameter(s) for 'addsub': {'disable': True}",
        "'torch.compile' optional parameter(s) for 'neuralnet': {}",
        "Model parameter file not found for 'addsub'",
    ):
        assert line in server.log, line
    assert "Model parameter file not found for 'neuralnet'" not in server.log
