"""On a real GPU (marker ``gpu``; skipped with the reason elsewhere, see docs/gpu.md):
onnxruntime on CUDA through IO binding and CUDA graphs, TensorRT where it can start, GPU
placement and memory statistics, NVML metrics under load, and DLPack with torch."""

from __future__ import annotations

import importlib
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
from gpu_support import gpu_needs, record
from models import make_config, mlp_model, mlp_reference, write_model

from inference import model_config_pb2 as mc
from service.backends.base import InstanceSpec
from service.backends.onnxruntime import OnnxRuntimeBackend
from service.backends.onnxruntime.binding import BoundRunner, GraphRunner
from service.core.loader import load_version
from service.core.model import ModelState
from service.gpus import inventory
from service.repository.config_file import read_config
from service.repository.layout import discover_models

pytestmark = pytest.mark.gpu

CUDA = "CUDAExecutionProvider"
TENSORRT = "TensorrtExecutionProvider"
WIDTH, LAYERS = 256, 3
# onnxruntime's CUDA provider runs FP32 MatMul in TF32 on Ampere and later (its use_tf32
# default, which Triton's backend keeps): about 1e-3 apart from the FP32 reference here.
TF32 = {"rtol": 1e-2, "atol": 1e-2}


@pytest.fixture(autouse=True)
def _cuda_build() -> None:
    gpu_needs(
        CUDA in ort.get_available_providers(),
        f"onnxruntime {ort.__version__} has no CUDA provider: install onnxruntime-gpu",
    )


def _repo(tmp_path: Path, extra: str = "", kind: str = "KIND_GPU") -> mc.ModelConfig:
    text = make_config(
        "mlp",
        [("INPUT0", "FP32", [WIDTH])],
        [("OUTPUT0", "FP32", [WIDTH])],
        max_batch_size=64,
        instance_kind=kind,
        extra=extra,
    )
    write_model(tmp_path, "mlp", mlp_model(width=WIDTH, layers=LAYERS), text)
    config: mc.ModelConfig = read_config(discover_models([tmp_path])["mlp"])
    return config


def _open(tmp_path: Path, extra: str = "") -> Any:
    config = _repo(tmp_path, extra)
    spec = InstanceSpec("mlp_0_0", "KIND_GPU", 0, 1)
    return OnnxRuntimeBackend().open(config, tmp_path / "mlp" / "1", spec)


def _check(instance: Any, rows: int, seed: int = 0) -> None:
    x = np.random.default_rng(seed).random((rows, WIDTH), dtype=np.float32)
    out = instance.execute({"INPUT0": x}, ["OUTPUT0"])["OUTPUT0"]
    np.testing.assert_allclose(out, mlp_reference(x, WIDTH, LAYERS), **TF32)


def test_kind_gpu_runs_on_cuda_through_io_binding(tmp_path: Path) -> None:
    instance = _open(tmp_path)
    try:
        assert instance.providers[0] == CUDA, instance.providers
        assert isinstance(instance.runner, BoundRunner)
        for rows in (1, 7, 64):
            _check(instance, rows, rows)
        record(f"{', '.join(instance.providers)}; {instance.runner.description}")
    finally:
        instance.close()


def test_cuda_graphs_one_per_batch_shape(tmp_path: Path) -> None:
    instance = _open(tmp_path, "optimization { cuda { graphs: true } }")
    try:
        assert isinstance(instance.runner, GraphRunner)
        for step, rows in enumerate([8, 8, 8, 3, 3, 8]):
            _check(instance, rows, step)
        assert instance.runner.graph_count == 2
        record("2 input shapes, 2 CUDA graphs captured and replayed, results correct")
    finally:
        instance.close()


def test_tensorrt_accelerator(tmp_path: Path) -> None:
    gpu_needs(TENSORRT in ort.get_available_providers(), "onnxruntime has no TensorRT provider")
    try:
        importlib.import_module("tensorrt")
    except ImportError:
        gpu_needs(False, "the tensorrt package (libnvinfer) is not installed")
    cache = tmp_path / "trt_cache"
    instance = _open(
        tmp_path,
        'optimization { execution_accelerators { gpu_execution_accelerator [{ name: "tensorrt" '
        'parameters { key: "precision_mode" value: "FP16" } '
        f'parameters {{ key: "trt_engine_cache_enable" value: "true" }} '
        f'parameters {{ key: "trt_engine_cache_path" value: "{cache}" }} }}] }} }}',
    )
    try:
        assert instance.providers[0] == TENSORRT, instance.providers
        _check(instance, 4)
    finally:
        instance.close()


async def test_auto_kind_lands_on_the_gpu_and_reports_gpu_memory(tmp_path: Path) -> None:
    assert inventory().supported(), "NVML finds no GPU although nvidia-smi does"
    config = _repo(tmp_path, kind="KIND_AUTO")
    model = load_version(config, 1, tmp_path / "mlp" / "1")
    try:
        assert model.state == ModelState.READY, model.reason
        assert model.config.instance_group[0].kind == mc.ModelInstanceGroup.KIND_GPU
        assert model.stats.gpu_memory_bytes.get(0, 0) > 0, model.stats.gpu_memory_bytes
        record(f"KIND_AUTO -> KIND_GPU; GPU memory {model.stats.gpu_memory_bytes[0]} bytes")
    finally:
        if model.scheduler is not None:
            await model.scheduler.stop()


def test_nvml_metrics_move_under_load(tmp_path: Path) -> None:
    from service.telemetry.gpu import GpuMetrics

    def reading(metrics: GpuMetrics, family: str) -> float:
        metrics.poll_once()
        line = next(x for x in metrics.render().splitlines() if x.startswith(family + "{"))
        return float(line.rsplit(" ", 1)[1])

    metrics = GpuMetrics(interval_s=0.2)
    gpu_needs(metrics.start(poll=False), "nvidia-ml-py is not installed or NVML sees no GPU")
    try:
        used_before = reading(metrics, "nv_gpu_memory_used_bytes")
        energy_before = reading(metrics, "nv_energy_consumption")
        instance = _open(tmp_path)
        stop = threading.Event()

        def load() -> None:
            x = np.ones((64, WIDTH), np.float32)
            while not stop.is_set():
                instance.execute({"INPUT0": x}, ["OUTPUT0"])

        worker = threading.Thread(target=load)
        worker.start()
        try:
            utilization = 0.0
            deadline = time.monotonic() + 10
            while utilization == 0.0 and time.monotonic() < deadline:
                time.sleep(0.5)
                utilization = reading(metrics, "nv_gpu_utilization")
            assert utilization > 0
            assert reading(metrics, "nv_gpu_memory_used_bytes") > used_before
            assert reading(metrics, "nv_energy_consumption") > energy_before
        finally:
            stop.set()
            worker.join()
            instance.close()
    finally:
        metrics.stop()


def _torch_cuda() -> Any:
    try:
        torch = importlib.import_module("torch")
    except ImportError:
        gpu_needs(False, "torch is not installed")
    gpu_needs(bool(torch.cuda.is_available()), "torch cannot use the GPU")
    return torch


def test_dlpack_with_torch_cuda_tensors() -> None:
    from service.backends.python import triton_python_backend_utils as pb_utils

    torch = _torch_cuda()
    source = torch.arange(6, dtype=torch.float32, device="cuda").reshape(2, 3)
    tensor = pb_utils.Tensor.from_dlpack("X", source)
    assert not tensor.is_cpu() and tensor.shape() == [2, 3]
    back = torch.from_dlpack(tensor.to_dlpack())
    assert back.is_cuda and back.data_ptr() == source.data_ptr()  # no copy either way
    np.testing.assert_array_equal(tensor.host_array(), source.cpu().numpy())
    host = pb_utils.Tensor("H", np.ones(3, np.float32))
    assert torch.from_dlpack(host).device.type == "cpu"


_TORCH_MODEL = """
import torch
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        assert args["model_instance_kind"] == "GPU"
        self.device = torch.device("cuda", int(args["model_instance_device_id"]))

    def execute(self, requests):
        out = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X")
            y = torch.from_dlpack(x).to(self.device) * 2
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor.from_dlpack("Y", y)]))
        return out
"""


def test_python_model_returns_gpu_tensors(tmp_path: Path) -> None:
    from python_models.harness import request, run
    from python_models.harness import write_model as write_python_model

    from service.backends.registry import get_backend

    _torch_cuda()
    config = write_python_model(
        tmp_path,
        "torchy",
        _TORCH_MODEL,
        'max_batch_size: 8 input [{ name: "X" data_type: TYPE_FP32 dims: [ -1 ] }] '
        'output [{ name: "Y" data_type: TYPE_FP32 dims: [ -1 ] }]',
    )
    spec = InstanceSpec("torchy_0_0", "KIND_GPU", 0, 1)
    instance = get_backend("python").open(config, tmp_path / "torchy" / "1", spec)
    try:
        x = np.arange(40_000, dtype=np.float32).reshape(2, -1)
        (sender,) = run(instance, request(X=x))
        assert sender.only.error is None, sender.only.error
        np.testing.assert_array_equal(sender.only.outputs["Y"], x * 2)
    finally:
        instance.close()
