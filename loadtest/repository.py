"""The benchmarks' model repositories, written into a temporary folder per run: the
default repository's add_sub (almost no compute: what serving one request costs), the
built-in identity backend, and ONNX models of ``tests/models.py`` with the tests' configs."""

from __future__ import annotations

import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from models import make_config, write_model
from server_process import DEFAULT_REPOSITORY

ADD_SUB = DEFAULT_REPOSITORY / "add_sub"
IoSpec = tuple[str, str, Sequence[int]]


def batching(delay_us: int | None = 500) -> str:
    """A dynamic_batching block; None: the block with Triton's defaults."""
    if delay_us is None:
        return "dynamic_batching { }\n"
    return f"dynamic_batching {{ max_queue_delay_microseconds: {delay_us} }}\n"


def parameters(values: Mapping[str, str]) -> str:
    """Config ``parameters`` entries (a backend's thread settings, spinning, ...)."""
    return "".join(
        f'parameters {{ key: "{k}" value: {{ string_value: "{v}" }} }}\n' for k, v in values.items()
    )


def add_sub(
    root: Path, name: str = "add_sub", max_batch_size: int | None = None, extra: str = ""
) -> None:
    """The default repository's add_sub ([1, 16] FP32 x 2) under another name and config."""
    shutil.copytree(ADD_SUB, root / name)
    config = (ADD_SUB / "config.pbtxt").read_text(encoding="utf-8")
    config = config.replace('name: "add_sub"', f'name: "{name}"')
    if max_batch_size is not None:
        config = config.replace("max_batch_size: 8", f"max_batch_size: {max_batch_size}")
    (root / name / "config.pbtxt").write_text(config + extra, encoding="utf-8")


def identity_backend(
    root: Path, name: str, dims: str = "-1", tensors: int = 1, max_batch_size: int = 0,
    extra: str = "",
) -> None:  # fmt: skip
    """A model of the built-in identity backend: OUTPUT<i> = INPUT<i>, FP32 of ``dims``."""

    def io(kind: str) -> str:
        return ", ".join(
            f'{{ name: "{kind}{i}" data_type: TYPE_FP32 dims: [ {dims} ] }}' for i in range(tensors)
        )

    (root / name / "1").mkdir(parents=True)
    text = f'name: "{name}"\nbackend: "identity"\nmax_batch_size: {max_batch_size}\n'
    text += f"input [ {io('INPUT')} ]\noutput [ {io('OUTPUT')} ]\n{extra}"
    (root / name / "config.pbtxt").write_text(text, encoding="utf-8")


def onnx_model(
    root: Path, name: str, model: Any, inputs: Sequence[IoSpec], outputs: Sequence[IoSpec],
    **config: Any,
) -> Path:  # fmt: skip
    """An ONNX model (``tests/models.py``) with its config; returns its model.onnx."""
    write_model(root, name, model, make_config(name, inputs, outputs, **config))
    return root / name / "1" / "model.onnx"
