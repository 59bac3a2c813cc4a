"""framework-backends (issue 38's performance check): one MLP written for every framework
must be the same model, and the report's ratio must be served / in-process."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from models import mlp_reference

from loadtest import framework_mlp
from loadtest.scenario import parse
from loadtest.scenarios import framework_backends as fb

MODULES = {
    "onnxruntime": "onnxruntime",
    "pytorch": "torch",
    "tensorflow": "tensorflow",
    "openvino": "openvino",
}


def _first(output: Any) -> np.ndarray:
    """The one output, whatever container the framework returns it in."""
    if isinstance(output, (list, tuple)):
        return np.asarray(output[0])
    if hasattr(output, "values"):  # openvino's OVDict
        return np.asarray(next(iter(output.values())))
    return np.asarray(output)


@pytest.mark.parametrize("backend", framework_mlp.BACKENDS)
def test_every_framework_writes_the_same_mlp(backend: str, tmp_path: Path) -> None:
    pytest.importorskip(MODULES[backend])
    width, layers = 8, 2
    folder = tmp_path / "m"
    (folder / "1").mkdir(parents=True)
    framework_mlp.WRITERS[backend](folder / "1" / framework_mlp.FILES[backend], width, layers)
    run = framework_mlp._runner(backend, folder, 3, width, 1)
    x = np.random.default_rng(0).standard_normal((3, width), dtype=np.float32)
    # openvino's CPU plugin may run FP32 in bf16 (its default hint): a coarser bound there
    tolerance = 0.05 if backend == "openvino" else 1e-4
    np.testing.assert_allclose(
        _first(run()), mlp_reference(x, width=width, layers=layers), rtol=tolerance, atol=tolerance
    )


def test_configs_give_each_backend_its_threads_and_openvino_its_padding() -> None:
    for backend in framework_mlp.BACKENDS:
        text = framework_mlp.config("m", backend, 64, 2, 16, batching=True)
        assert "dynamic_batching { }" in text and "max_batch_size: 16" in text
        key = next(iter(framework_mlp.thread_parameters(backend, 2)))
        assert f'key: "{key}" value {{ string_value: "2" }}' in text
    openvino = framework_mlp.config("m", "openvino", 64, 1, 16, batching=False)
    assert "ENABLE_BATCH_PADDING" in openvino and "dynamic_batching" not in openvino


def _served(model: str, req_s: float, us: float) -> fb.Served:
    roles = {"engine loop": us / 2, "frontend loop (grpc.aio + ours)": us / 2}
    return fb.Served(model, 16, req_s, 8.0, us, roles, 1000, 1000, 0.1)


def test_report_divides_served_by_in_process_and_compares_tiny_costs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(fb.os, "cpu_count", lambda: 2)
    args = parse(fb.FrameworkBackends, [])
    assert (args.concurrency, args.rounds, args.tiny_concurrency) == (16, 2, 8)
    assert args.mlp == [fb.Shape(3, 2048)]
    served = {
        "mlp3x2048_onnxruntime": _served("mlp3x2048_onnxruntime", 950.0, 900.0),
        "mlp3x2048_pytorch": _served("mlp3x2048_pytorch", 400.0, 900.0),
        "tiny_onnxruntime": _served("tiny_onnxruntime", 2000.0, 600.0),
        "tiny_pytorch": _served("tiny_pytorch", 1800.0, 900.0),
    }
    in_process = {
        "mlp3x2048_onnxruntime": {"batch": 8, "samples_per_s": 1000.0, "ms_per_run": 8.0},
        "mlp3x2048_pytorch": {"batch": 8, "samples_per_s": 800.0, "ms_per_run": 10.0},
    }
    data = {"backends": ["onnxruntime", "pytorch"], "served": served, "in_process": in_process}
    text = fb.report(args, ["framework-backends"], data)
    onnx_row = next(line for line in text.splitlines() if line.startswith("| ONNX Runtime |"))
    torch_row = next(line for line in text.splitlines() if line.startswith("| PyTorch"))
    assert "| 0.95 | yes |" in onnx_row
    assert "| 0.50 | **no** |" in torch_row
    assert "| vs ONNX Runtime | 1.00 | 1.50 |" in text
    # ONNX: 0.95 served / in-process against 2 / (2 + 1000 x 600 µs) = 0.77: flagged
    assert "| 0.77 |" in onnx_row
    assert "Above its bound: ONNX Runtime." in text
    assert "## Side by side" not in text  # one shape: nothing to set beside it


def test_a_second_shape_gets_its_table_and_the_side_by_side_ratios(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``--mlp 3x2048 8x4096``: each shape's models, table and ratio against its bound."""
    monkeypatch.setattr(fb.os, "cpu_count", lambda: 2)
    args = parse(fb.FrameworkBackends, ["--mlp", "3x2048", "8x4096"])
    small, large = fb.Shape(3, 2048), fb.Shape(8, 4096)
    assert args.mlp == [small, large] and large.model("pytorch") == "mlp8x4096_pytorch"
    served = {
        "mlp3x2048_pytorch": _served("mlp3x2048_pytorch", 400.0, 900.0),
        "mlp8x4096_pytorch": _served("mlp8x4096_pytorch", 95.0, 900.0),
        "tiny_pytorch": _served("tiny_pytorch", 1800.0, 500.0),
    }
    in_process = {
        "mlp3x2048_pytorch": {"batch": 8, "samples_per_s": 800.0, "ms_per_run": 10.0},
        "mlp8x4096_pytorch": {
            "batch": 16,
            "samples_per_s": 100.0,
            "ms_per_run": 160.0,
            "cpu_ms_per_sample": 0.81,
        },
    }
    data = {"backends": ["pytorch"], "served": served, "in_process": in_process}
    text = fb.report(args, ["framework-backends"], data)
    assert "## MLP 3 x 2048 FP32" in text and "## MLP 8 x 4096 FP32" in text
    # 2 / (2 + 800 x 500 µs) = 0.83 and 2 / (2 + 100 x 500 µs) = 0.98
    assert "| PyTorch (TorchScript) | 0.50 | 0.83 | 0.95 | 0.98 |" in text
    # the large shape's row: 810 µs of CPU a sample in-process against 900 served
    assert "| 900 | 810 | 0.90 | 0.10 |" in text
    with pytest.raises(SystemExit):
        parse(fb.FrameworkBackends, ["--mlp", "4096"])


def test_bound_leaves_out_the_tiny_models_own_execution() -> None:
    """The serving cost is the tiny model's CPU per request less its instance threads."""
    roles = {"engine instance threads": 200.0, "engine loop": 400.0}
    tiny = fb.Served("tiny_x", 8, 2000.0, 1.0, 600.0, roles, 1000, 1000, 0.0)
    assert fb.bound(2, 1000.0, tiny) == pytest.approx(2 / (2 + 1000 * 400e-6))
    assert fb.bound(16, 1000.0, tiny) > fb.bound(2, 1000.0, tiny)  # more cores, less bound
