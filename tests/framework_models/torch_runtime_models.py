"""Models for the PyTorch 2 python runtime (``backend: "pytorch"``, ``runtime: "model.py"``),
written into ``<root>/<name>/`` with their configs: ``python torch_runtime_models.py ROOT``
(or ``--models_dir=ROOT``, as Triton's generators take it).
Run by a Python with torch (the server's, or the qa runner's generator Python).

They stand in for the models L0_pytorch_python_runtime/test.sh copies from Triton's data
store (``pytorch_model_store``: addsub, neuralnet; ``libtorch_model_store``:
resnet50_libtorch), which are not in Triton's repository: the names, the files' layout and
the parameters are the ones test.sh and infer.py use, the networks are small.

- addsub: ``model.py`` only (no parameter file), no batching, ``torch.compile`` disabled
  by TORCH_COMPILE_OPTIONAL_PARAMETERS; INPUT0/INPUT1 -> OUTPUT0 (sum), OUTPUT1 (diff).
- neuralnet: ``model.py`` + ``model.pt`` (its state_dict) + ``test_data.json`` (inputs and,
  per row, the largest output: infer.py's labels), max_batch_size 8, dynamic batching,
  NUM_THREADS 4 / NUM_INTEROP_THREADS 2.
- resnet50_libtorch: a TorchScript ``model.pt`` with parameters (OUTPUT__0 = 2 * INPUT__0
  + 1), its config as the libtorch store writes it (``platform: "pytorch_libtorch"``);
  test.sh turns it into a runtime model with KIND_MODEL.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from torch import nn

ADDSUB_PY = """import torch


class AddSubNet(torch.nn.Module):
    def forward(self, input0, input1):
        return input0 + input1, input0 - input1
"""

NEURALNET_PY = """import torch
from torch import nn


class NeuralNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.hidden = nn.Linear(8, 16)
        self.out = nn.Linear(16, 4)

    def forward(self, x):
        return self.out(torch.relu(self.hidden(x)))
"""

ADDSUB_CONFIG = """name: "addsub"
backend: "pytorch"
runtime: "model.py"
max_batch_size: 0
input [
  { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] }
]
output [
  { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] }
]
instance_group [ { kind: KIND_CPU } ]
parameters: {
  key: "TORCH_COMPILE_OPTIONAL_PARAMETERS"
  value: { string_value: "{\\"disable\\": true}" }
}
"""

NEURALNET_CONFIG = """name: "neuralnet"
backend: "pytorch"
runtime: "model.py"
max_batch_size: 8
input [ { name: "INPUT" data_type: TYPE_FP32 dims: [ 8 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_FP32 dims: [ 4 ] } ]
dynamic_batching { max_queue_delay_microseconds: 100000 }
instance_group [ { kind: KIND_CPU } ]
parameters: { key: "NUM_THREADS" value: { string_value: "4" } }
parameters: { key: "NUM_INTEROP_THREADS" value: { string_value: "2" } }
"""

TORCHSCRIPT_CONFIG = """name: "resnet50_libtorch"
platform: "pytorch_libtorch"
max_batch_size: 8
input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 3 ] } ]
output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 3 ] } ]
"""


class ScaleShift(nn.Module):
    """2 * x + 1, held in parameters (KIND_MODEL takes the first parameter's device)."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.tensor(2.0))
        self.shift = nn.Parameter(torch.tensor(1.0))

    def forward(self, INPUT__0: torch.Tensor) -> torch.Tensor:
        return INPUT__0 * self.scale + self.shift


def _model(root: Path, name: str, config: str) -> Path:
    folder = root / name / "1"
    folder.mkdir(parents=True, exist_ok=True)
    (root / name / "config.pbtxt").write_text(config)
    return folder


def write_addsub(root: Path) -> None:
    (_model(root, "addsub", ADDSUB_CONFIG) / "model.py").write_text(ADDSUB_PY)


def write_neuralnet(root: Path) -> None:
    folder = _model(root, "neuralnet", NEURALNET_CONFIG)
    (folder / "model.py").write_text(NEURALNET_PY)
    scope: dict[str, object] = {}
    exec(compile(NEURALNET_PY, "model.py", "exec"), scope)  # the class the file defines
    net = scope["NeuralNet"]()  # type: ignore[operator]
    torch.save(net.state_dict(), folder / "model.pt")
    inputs = torch.rand(16, 8) * 10
    with torch.no_grad():
        labels = net(inputs).max(dim=1).values
    data = {"input_data": inputs.tolist(), "labels": [round(v, 3) for v in labels.tolist()]}
    (folder / "test_data.json").write_text(json.dumps(data))


def write_torchscript(root: Path) -> None:
    folder = _model(root, "resnet50_libtorch", TORCHSCRIPT_CONFIG)
    torch.jit.save(torch.jit.script(ScaleShift()), str(folder / "model.pt"))


def main() -> None:
    # ROOT, or --models_dir=ROOT as Triton's generators take it (the qa runner's call)
    root = Path(sys.argv[1].removeprefix("--models_dir="))
    torch.manual_seed(0)
    write_addsub(root)
    write_neuralnet(root)
    write_torchscript(root)


if __name__ == "__main__":
    main()
