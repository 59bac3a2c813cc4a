"""TorchScript models for tests/integration/test_pytorch_backend.py, written into
``<root>/<name>/1/model.pt`` (configs are the tests' own). Run by the server's Python:
``python torch_models.py ROOT NAME...``."""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from torch import nn


class AddSub(nn.Module):
    """(INPUT0 + INPUT1, INPUT0 - INPUT1), any dtype."""

    def forward(self, INPUT0: torch.Tensor, INPUT1: torch.Tensor):
        return INPUT0 + INPUT1, INPUT0 - INPUT1


class DictInput(nn.Module):
    """One Dict[str, Tensor] argument: every input by its config name."""

    def forward(self, inputs: dict[str, torch.Tensor]):
        return inputs["x"] * 2.0 + inputs["y"]


class Strings(nn.Module):
    """List[str] in, List[str] out (Triton's 1-dimensional BYTES)."""

    def forward(self, TEXT: list[str]) -> list[str]:
        return [t.upper() + "!" for t in TEXT]


class WrongType(nn.Module):
    """Returns INT64 where the config says FP32."""

    def forward(self, INPUT0: torch.Tensor):
        return INPUT0.to(torch.int64)


class Accumulate(nn.Module):
    """Implicit state: OUTPUT__0 = the running sum of INPUT__0 since START__1."""

    def forward(self, value: torch.Tensor, start: torch.Tensor, held: torch.Tensor):
        # Argument names unlike the config's: Triton's state rule wants <name>__<index>
        # placing, which forward-argument names would take precedence over.
        state = torch.where(start != 0, torch.zeros_like(held), held)
        total = state + value
        return total, total


class Mlp(nn.Module):
    """A few ms per batch on two cores: what the batching tests measure."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 256))

    def forward(self, INPUT__0: torch.Tensor):
        return self.layers(INPUT__0)


MODELS = {
    "add_sub": AddSub,
    "dict_input": DictInput,
    "strings": Strings,
    "wrong_type": WrongType,
    "accumulate": Accumulate,
    "mlp": Mlp,
}


def main() -> None:
    root = Path(sys.argv[1])
    torch.manual_seed(0)
    for name in sys.argv[2:]:
        kind = name.split(":")[-1]
        folder = root / name.split(":")[0] / "1"
        folder.mkdir(parents=True, exist_ok=True)
        torch.jit.save(torch.jit.script(MODELS[kind]()), str(folder / "model.pt"))


if __name__ == "__main__":
    main()
