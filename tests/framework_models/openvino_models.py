"""OpenVINO IR models for tests/integration/test_openvino_backend.py, written into
``<root>/<name>/1/model.xml`` (+ ``model.bin``; configs are the tests' own) with
openvino's own API. Run by the server's Python: ``python openvino_models.py ROOT NAME...``
(``NAME`` or ``FOLDER:KIND``)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import openvino as ov
import openvino.opset13 as ops


def _add_sub(batch: int | None, dtype: type = np.float32) -> ov.Model:
    """OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1 on [batch, 4] (as Triton's
    qa ``openvino_*`` models); ``batch`` None: a dynamic batch with an ``N`` layout, 0:
    no batch dimension."""
    shape = [4] if batch == 0 else [-1 if batch is None else batch, 4]
    a = ops.parameter(shape, dtype, name="INPUT0")
    b = ops.parameter(shape, dtype, name="INPUT1")
    total = ops.add(a, b)
    total.output(0).get_tensor().set_names({"OUTPUT0"})
    diff = ops.subtract(a, b)
    diff.output(0).get_tensor().set_names({"OUTPUT1"})
    if batch != 0:
        for port in (a, b):
            port.set_layout(ov.Layout("N..."))
    model = ov.Model([total, diff], [a, b], "add_sub")
    if batch != 0:
        for result in model.get_results():
            result.set_layout(ov.Layout("N..."))
    return model


def _mlp() -> ov.Model:
    """[batch, 256] -> two dense layers: a few ms per batch, what batching tests measure."""
    rng = np.random.default_rng(0)
    x = ops.parameter([-1, 256], np.float32, name="INPUT")
    w1 = ops.constant(rng.standard_normal((256, 256)).astype(np.float32) / 16)
    w2 = ops.constant(rng.standard_normal((256, 256)).astype(np.float32) / 16)
    hidden = ops.relu(ops.matmul(x, w1, False, False))
    out = ops.matmul(hidden, w2, False, False)
    out.output(0).get_tensor().set_names({"OUTPUT"})
    x.set_layout(ov.Layout("N..."))
    model = ov.Model([out], [x], "mlp")
    model.get_results()[0].set_layout(ov.Layout("N..."))
    return model


def _accumulate() -> ov.Model:
    """Implicit state with a START control (no batch dimension): OUTPUT = the running sum
    of INPUT since the sequence started, kept in STATE / OUTPUT_STATE."""
    value = ops.parameter([1], np.int32, name="INPUT")
    start = ops.parameter([1], np.int32, name="START")
    held = ops.parameter([1], np.int32, name="STATE")
    zero = ops.constant(np.zeros(1, np.int32))
    state = ops.select(ops.not_equal(start, zero), zero, held)
    total = ops.add(state, value)
    total.output(0).get_tensor().set_names({"OUTPUT"})
    again = ops.add(state, value)
    again.output(0).get_tensor().set_names({"OUTPUT_STATE"})
    return ov.Model([total, again], [value, start, held], "accumulate")


MODELS = {
    "accumulate": _accumulate,
    "dynamic_batch": lambda: _add_sub(None),
    "fixed_batch": lambda: _add_sub(1),
    "nobatch": lambda: _add_sub(0),
    "int32": lambda: _add_sub(None, np.int32),
    "mlp": _mlp,
}


def main() -> None:
    root = Path(sys.argv[1])
    for name in sys.argv[2:]:
        folder, _, kind = name.partition(":")
        target = root / folder / "1"
        target.mkdir(parents=True, exist_ok=True)
        ov.save_model(MODELS[kind or folder](), str(target / "model.xml"))


if __name__ == "__main__":
    main()
