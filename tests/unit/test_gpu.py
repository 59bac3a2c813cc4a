"""GPU execution providers: run only where onnxruntime can really use CUDA."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from models import identity_model, make_config, write_model

from inference import model_config_pb2 as mc
from service.backends.base import InstanceSpec
from service.backends.onnxruntime import OnnxRuntimeBackend
from service.repository.config_file import read_config
from service.repository.layout import discover_models

CUDA = "CUDAExecutionProvider"

pytestmark = pytest.mark.skipif(
    CUDA not in ort.get_available_providers() or shutil.which("nvidia-smi") is None,
    reason="no usable CUDA device: install the 'gpu' extra on a machine with an NVIDIA GPU",
)


def test_kind_gpu_instance_runs_on_cuda(tmp_path: Path) -> None:
    config_text = make_config(
        "ident",
        [("INPUT0", "FP32", [4])],
        [("OUTPUT0", "FP32", [4])],
        max_batch_size=8,
        instance_kind="KIND_GPU",
    )
    write_model(tmp_path, "ident", identity_model("FP32", ["batch", 4]), config_text)
    config: mc.ModelConfig = read_config(discover_models([tmp_path])["ident"])
    instance = OnnxRuntimeBackend().open(
        config, tmp_path / "ident" / "1", InstanceSpec("ident_0_0", "KIND_GPU", 0, 1)
    )
    try:
        assert instance.providers[0] == CUDA
        x = np.arange(8, dtype=np.float32).reshape(2, 4)
        np.testing.assert_array_equal(instance.execute({"INPUT0": x}, ["OUTPUT0"])["OUTPUT0"], x)
    finally:
        instance.close()
