"""Where instances run: instance_group expansion with Triton's GPU rules, provider choice
and option mapping (Triton's onnxruntime backend names), the check of what onnxruntime
really enabled, and the GPU inventory read from a fake NVML. No device needed."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from google.protobuf import text_format
from models import add_sub_model, make_config, write_model
from proc_info import process_tree

from inference import model_config_pb2 as mc
from service.backends.base import InstanceSpec
from service.backends.onnxruntime import OnnxRuntimeBackend
from service.backends.onnxruntime import backend as ort_backend
from service.backends.onnxruntime.providers import (
    CPU,
    CUDA,
    OPENVINO,
    TENSORRT,
    choose_providers,
    cuda_graphs_enabled,
)
from service.core.instance_groups import instance_specs
from service.core.loader import load_version
from service.core.model import ModelState, ModelVersion
from service.gpus import GpuInventory, set_inventory
from service.repository.config_file import read_config
from service.repository.layout import discover_models


def _config(text: str) -> mc.ModelConfig:
    return text_format.Parse(text, mc.ModelConfig())


def _spec(kind: str = "KIND_CPU", device_id: int = 0) -> InstanceSpec:
    return InstanceSpec(name="m_0_0", kind=kind, device_id=device_id, threads=1)


# --------------------------------------------------------------------------- instance_specs


def test_defaults_filled_into_config() -> None:
    """No group: one named as the model, as Triton 2.51 names it (its config endpoint
    shows 'm', its instance is 'm_0'); an unnamed group is 'm_<index>'."""
    config = _config('name: "m"')
    specs = instance_specs(config, cpu_count=8, gpus=[])
    assert specs == [InstanceSpec(name="m_0", kind="KIND_CPU", device_id=0, threads=8)]
    (group,) = config.instance_group
    assert (group.name, group.count, group.kind) == ("m", 1, mc.ModelInstanceGroup.KIND_CPU)
    unnamed = _config('name: "m" instance_group [{ count: 2 }]')
    names = [s.name for s in instance_specs(unnamed, cpu_count=8, gpus=[])]
    assert names == ["m_0_0", "m_0_1"]


def test_auto_kind_without_gpus_is_cpu() -> None:
    config = _config('name: "m" instance_group [{ count: 0 kind: KIND_AUTO }]')
    assert [s.kind for s in instance_specs(config, cpu_count=4, gpus=[])] == ["KIND_CPU"]
    assert config.instance_group[0].count == 1
    assert config.instance_group[0].kind == mc.ModelInstanceGroup.KIND_CPU


def test_auto_kind_with_gpus_takes_every_gpu() -> None:
    config = _config('name: "m"')  # no instance_group at all: KIND_AUTO, as in Triton
    specs = instance_specs(config, cpu_count=4, gpus=[0, 1])
    assert [(s.name, s.kind, s.device_id) for s in specs] == [
        ("m_0", "KIND_GPU", 0),
        ("m_0", "KIND_GPU", 1),
    ]
    assert list(config.instance_group[0].gpus) == [0, 1]
    assert config.instance_group[0].kind == mc.ModelInstanceGroup.KIND_GPU


def test_auto_kind_stays_on_cpu_when_the_backend_cannot_use_gpus() -> None:
    config = _config('name: "m"')
    specs = instance_specs(config, cpu_count=4, gpus=[0], backend_gpu=False)
    assert [s.kind for s in specs] == ["KIND_CPU"]
    assert list(config.instance_group[0].gpus) == []


def test_auto_kind_listing_a_missing_gpu_turns_cpu_and_is_refused() -> None:
    """Triton turns the group into KIND_CPU and keeps its gpus, which its check refuses."""
    config = _config('name: "m" instance_group [{ kind: KIND_AUTO gpus: [0, 3] }]')
    with pytest.raises(ValueError, match="has kind KIND_CPU but specifies one or more GPUs"):
        instance_specs(config, cpu_count=4, gpus=[0, 1])


def test_gpu_count_is_per_listed_gpu() -> None:
    config = _config(
        'name: "m" instance_group [{ count: 2 kind: KIND_GPU gpus: [0, 2] }, '
        "{ count: 1 kind: KIND_GPU }]"
    )
    specs = instance_specs(config, cpu_count=12, gpus=[0, 1, 2])
    assert [(s.name, s.device_id) for s in specs] == [
        ("m_0_0", 0),
        ("m_0_0", 2),
        ("m_0_1", 0),
        ("m_0_1", 2),
        ("m_1_0", 0),
        ("m_1_0", 1),
        ("m_1_0", 2),
    ]
    assert {s.threads for s in specs} == {1}  # 12 // 7
    assert list(config.instance_group[1].gpus) == [0, 1, 2]


def test_thread_budget_split_across_all_instances() -> None:
    config = _config(
        'name: "m" instance_group [{ count: 2 kind: KIND_CPU }, '
        '{ name: "extra" count: 1 kind: KIND_CPU }]'
    )
    specs = instance_specs(config, cpu_count=8)
    assert [s.name for s in specs] == ["m_0_0", "m_0_1", "extra_0"]
    assert [s.threads for s in specs] == [2, 2, 2]
    five = _config('name: "m" instance_group [{ count: 5 kind: KIND_CPU }]')
    assert {s.threads for s in instance_specs(five, cpu_count=2)} == {1}


def test_cpu_models_never_ask_for_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse() -> list[int]:
        raise AssertionError("NVML consulted for a CPU model")

    monkeypatch.setattr("service.core.instance_groups._supported_gpus", refuse)
    config = _config('name: "m" instance_group [{ count: 2 kind: KIND_CPU }]')
    assert len(instance_specs(config, cpu_count=2)) == 2
    instance_specs(_config('name: "m"'), cpu_count=2, backend_gpu=False)


@pytest.mark.parametrize(
    ("text", "gpus", "message"),
    [
        (
            "instance_group [{ kind: KIND_GPU }]",
            [],
            "instance group m_0 of model m has kind KIND_GPU but no GPUs are available",
        ),
        (
            'instance_group [{ name: "g" kind: KIND_GPU gpus: [1] }]',
            [0],
            "instance group g of model m specifies invalid or unsupported gpu id 1. GPUs with "
            "at least the minimum required CUDA compute compatibility of 6.000000 are: 0",
        ),
        (
            "instance_group [{ kind: KIND_CPU gpus: [0] }]",
            [0],
            "instance group m_0 of model m has kind KIND_CPU but specifies one or more GPUs",
        ),
        (
            "instance_group [{ kind: KIND_MODEL gpus: [0] }]",
            [0],
            "instance group m_0 of model m has kind KIND_MODEL but specifies one or more GPUs",
        ),
    ],
)
def test_bad_gpu_groups_fail_with_tritons_text(text: str, gpus: list[int], message: str) -> None:
    with pytest.raises(ValueError) as info:
        instance_specs(_config(f'name: "m" {text}'), cpu_count=2, gpus=gpus)
    assert str(info.value) == message


# --------------------------------------------------------------------------- GPU inventory


@dataclass
class _Proc:
    pid: int
    usedGpuMemory: int | None


@dataclass
class _Dev:
    uuid: str
    capability: tuple[int, int] = (9, 0)
    processes: list[_Proc] = field(default_factory=list)


class _Nvml:
    def __init__(self, devices: list[_Dev], broken: bool = False) -> None:
        self.devices = devices
        self.broken = broken

    def nvmlInit(self) -> None:
        if self.broken:
            raise RuntimeError("NVML Shared Library Not Found")

    def nvmlDeviceGetCount(self) -> int:
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> object:
        return self.devices[index]

    def nvmlDeviceGetUUID(self, handle: object) -> bytes:
        assert isinstance(handle, _Dev)
        return handle.uuid.encode()

    def nvmlDeviceGetName(self, handle: object) -> str:
        return "NVIDIA Fake"

    def nvmlDeviceGetCudaComputeCapability(self, handle: object) -> tuple[int, int]:
        assert isinstance(handle, _Dev)
        return handle.capability

    def nvmlDeviceGetComputeRunningProcesses(self, handle: object) -> list[_Proc]:
        assert isinstance(handle, _Dev)
        return handle.processes


def test_inventory_orders_by_cuda_visible_devices_and_filters_old_gpus() -> None:
    devices = [_Dev("GPU-aa"), _Dev("GPU-bb", (5, 2)), _Dev("GPU-cc", (8, 6))]
    inv = GpuInventory(load=lambda: _Nvml(devices), cuda_visible="2,1,0")
    assert [(g.ordinal, g.uuid) for g in inv.gpus()] == [
        (0, "GPU-cc"),
        (1, "GPU-bb"),
        (2, "GPU-aa"),
    ]
    assert inv.supported() == [0, 2]  # compute capability 5.2 is below Triton's 6.0


def test_inventory_without_nvml_has_no_gpus(caplog: pytest.LogCaptureFixture) -> None:
    def missing() -> _Nvml:
        raise ImportError("No module named 'pynvml'")

    with caplog.at_level(logging.INFO):
        assert GpuInventory(load=missing).gpus() == []
        assert GpuInventory(load=lambda: _Nvml([], broken=True)).supported() == []
    assert "nvidia-ml-py is not installed" in caplog.text and "Not Found" in caplog.text
    assert GpuInventory(load=missing).process_memory() == {}


def test_inventory_process_memory_is_this_process_only() -> None:
    devices = [
        _Dev("GPU-aa", processes=[_Proc(10, 500), _Proc(11, 7), _Proc(10, 20)]),
        _Dev("GPU-bb", processes=[_Proc(10, None)]),
    ]
    inv = GpuInventory(load=lambda: _Nvml(devices), cuda_visible=None, use_environment=False)
    assert inv.process_memory(pid=10) == {0: 520, 1: 0}


async def test_load_reports_gpu_memory_per_model(tmp_path: Path) -> None:
    """A model placed on a GPU reports the device bytes its load took (fake device, and a
    CPU fallback so that the session itself can be made here)."""
    device = _Dev("GPU-aa", processes=[_Proc(os.getpid(), 1000)])

    class Growing(_Nvml):
        def nvmlDeviceGetComputeRunningProcesses(self, handle: object) -> list[_Proc]:
            procs = super().nvmlDeviceGetComputeRunningProcesses(handle)
            device.processes = [_Proc(os.getpid(), (procs[0].usedGpuMemory or 0) + 4096)]
            return procs

    model = _load_on_fake_gpu(tmp_path, Growing([device]))
    try:
        assert model.state == ModelState.READY, model.reason
        assert model.stats.gpu_memory_bytes == {0: 4096}
    finally:
        if model.scheduler is not None:
            await model.scheduler.stop()


async def test_load_reports_gpu_memory_of_instance_workers(tmp_path: Path) -> None:
    """With the instances in worker processes (the split layout's ``isolate``), the model's
    device memory is what NVML gives the workers' pids, not this process's growth (fake
    device: every child of this process holds 8 KiB, this process 1000 bytes throughout)."""

    class PerProcess(_Nvml):
        def nvmlDeviceGetComputeRunningProcesses(self, handle: object) -> list[_Proc]:
            children = [p for p in process_tree(os.getpid()) if p != os.getpid()]
            return [_Proc(os.getpid(), 1000)] + [_Proc(p, 8192) for p in children]

    model = _load_on_fake_gpu(tmp_path, PerProcess([_Dev("GPU-aa")]), instances=2, isolate=True)
    try:
        assert model.state == ModelState.READY, model.reason
        assert model.stats.gpu_memory_bytes == {0: 2 * 8192}  # two workers, nothing of ours
    finally:
        if model.scheduler is not None:
            await model.scheduler.stop()


def _load_on_fake_gpu(
    root: Path, nvml: _Nvml, instances: int = 1, isolate: bool = False
) -> ModelVersion:
    """add_sub as model 'gm' on KIND_GPU, loaded with ``nvml`` as the GPUs (and a CPU
    fallback, so that the sessions themselves can be made here)."""
    text = make_config(
        "gm", [("INPUT0", "FP32", [4]), ("INPUT1", "FP32", [4])],
        [("OUTPUT0", "FP32", [4]), ("OUTPUT1", "FP32", [4])], max_batch_size=4,
        instance_kind="KIND_GPU", instance_count=instances,
    ) + 'parameters { key: "allow_cpu_fallback" value { string_value: "true" } }\n'  # fmt: skip
    write_model(root, "gm", add_sub_model("FP32", ["batch", 4]), text)
    set_inventory(GpuInventory(load=lambda: nvml, use_environment=False))
    try:
        return load_version(_config_file(root / "gm"), 1, root / "gm" / "1", isolate=isolate)
    finally:
        set_inventory(None)


def _config_file(folder: Path) -> mc.ModelConfig:
    return read_config(discover_models([folder.parent])[folder.name])


# --------------------------------------------------------------------------- choose_providers


def test_providers_cpu_only() -> None:
    choice = choose_providers(_config('name: "m"'), _spec(), [CPU])
    assert (choice.providers, choice.dropped, choice.required) == ([(CPU, {})], [], [])


def test_providers_cpu_kind_ignores_gpu_accelerators() -> None:
    config = _config(_TRT_CONFIG)
    assert choose_providers(config, _spec(), [TENSORRT, CUDA, CPU]).names == [CPU]


_CUDA_DEFAULTS = {
    "cudnn_conv_algo_search": "EXHAUSTIVE",
    "gpu_mem_limit": str(2**64 - 1),
    "arena_extend_strategy": "kNextPowerOfTwo",
    "do_copy_in_default_stream": "1",
}


def test_providers_gpu_gets_cuda_with_tritons_defaults() -> None:
    choice = choose_providers(_config('name: "m"'), _spec("KIND_GPU", 1), [CUDA, CPU])
    assert choice.providers == [(CUDA, {**_CUDA_DEFAULTS, "device_id": "1"}), (CPU, {})]
    assert choice.required == [CUDA]


def test_providers_cuda_parameters_mapped() -> None:
    config = _config(
        'name: "m" parameters [{ key: "cudnn_conv_algo_search" value { string_value: "1" } }, '
        '{ key: "gpu_mem_limit" value { string_value: "4294967296" } }, '
        '{ key: "arena_extend_strategy" value { string_value: "1" } }, '
        '{ key: "do_copy_in_default_stream" value { string_value: "false" } }]'
    )
    options = choose_providers(config, _spec("KIND_GPU"), [CUDA, CPU]).providers[0][1]
    assert options == {
        "device_id": "0",
        "cudnn_conv_algo_search": "HEURISTIC",
        "gpu_mem_limit": "4294967296",
        "arena_extend_strategy": "kSameAsRequested",
        "do_copy_in_default_stream": "0",
    }


def test_providers_cuda_accelerator_and_graphs() -> None:
    config = _config(
        'name: "m" optimization { execution_accelerators { gpu_execution_accelerator [{ '
        'name: "cuda" parameters { key: "use_ep_level_unified_stream" value: "true" } '
        'parameters { key: "cudnn_conv_use_max_workspace" value: "1" } }] } }'
    )
    options = choose_providers(config, _spec("KIND_GPU"), [CUDA, CPU]).providers[0][1]
    assert options["use_ep_level_unified_stream"] == "1"
    assert options["cudnn_conv_use_max_workspace"] == "1"
    assert "enable_cuda_graph" not in options and not cuda_graphs_enabled(config)
    graphs = _config('name: "m" optimization { cuda { graphs: true } }')
    assert cuda_graphs_enabled(graphs)
    gopts = choose_providers(graphs, _spec("KIND_GPU"), [CUDA, CPU]).providers[0][1]
    assert gopts["enable_cuda_graph"] == "1"
    via_param = _config(
        'name: "m" optimization { execution_accelerators { gpu_execution_accelerator [{ '
        'name: "cuda" parameters { key: "enable_cuda_graph" value: "true" } }] } }'
    )
    assert cuda_graphs_enabled(via_param)


_TRT_CONFIG = """
name: "m"
optimization { execution_accelerators { gpu_execution_accelerator [{
  name: "tensorrt"
  parameters { key: "precision_mode" value: "FP16" }
  parameters { key: "max_workspace_size_bytes" value: "1073741824" }
  parameters { key: "trt_engine_cache_enable" value: "true" }
  parameters { key: "trt_engine_cache_path" value: "/tmp/trt_cache" }
  parameters { key: "trt_builder_optimization_level" value: "3" }
}] } }
"""


def test_providers_tensorrt_first_with_tritons_option_names() -> None:
    choice = choose_providers(_config(_TRT_CONFIG), _spec("KIND_GPU", 3), [TENSORRT, CUDA, CPU])
    assert choice.names == [TENSORRT, CUDA, CPU]
    assert choice.providers[0][1] == {
        "device_id": "3",
        "trt_fp16_enable": "1",
        "trt_max_workspace_size": "1073741824",
        "trt_engine_cache_enable": "1",
        "trt_engine_cache_path": "/tmp/trt_cache",
        "trt_builder_optimization_level": "3",
    }
    assert choice.providers[1][1]["device_id"] == "3"
    assert choice.required == [TENSORRT, CUDA]


def test_providers_tensorrt_int8_and_fp32() -> None:
    int8 = _config(_TRT_CONFIG.replace('value: "FP16"', 'value: "INT8"'))
    options = choose_providers(int8, _spec("KIND_GPU"), [TENSORRT, CUDA, CPU]).providers[0][1]
    assert options["trt_int8_enable"] == "1" and "trt_fp16_enable" not in options
    fp32 = _config(_TRT_CONFIG.replace('value: "FP16"', 'value: "FP32"'))
    options = choose_providers(fp32, _spec("KIND_GPU"), [TENSORRT, CUDA, CPU]).providers[0][1]
    assert "trt_int8_enable" not in options and "trt_fp16_enable" not in options


@pytest.mark.parametrize(
    ("replace", "message"),
    [
        ('value: "FP16"', "unsupported precision mode 'fp16' is requested"),
        ('key: "trt_builder_optimization_level"', "unknown parameter 'bogus' is provided for "
         "TensorRT Execution Accelerator"),
        ('value: "true"', "failed to convert 'maybe' to boolean value"),
        ('value: "3"', "failed to convert 'x3' to integral number"),
    ],
)  # fmt: skip
def test_providers_bad_tensorrt_parameters_fail(replace: str, message: str) -> None:
    bad = {
        'value: "FP16"': 'value: "fp16"',
        'key: "trt_builder_optimization_level"': 'key: "bogus"',
        'value: "true"': 'value: "maybe"',
        'value: "3"': 'value: "x3"',
    }[replace]
    config = _config(_TRT_CONFIG.replace(replace, bad))
    with pytest.raises(ValueError, match="^" + message.replace("(", r"\(")):
        choose_providers(config, _spec("KIND_GPU"), [TENSORRT, CUDA, CPU])


_ACCELERATORS = (
    "optimization {{ execution_accelerators {{ "
    '{kind}_execution_accelerator [{{ name: "{name}" }}] }} }}'
)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            _ACCELERATORS.format(kind="gpu", name="gpu_io"),
            "unknown Execution Accelerator 'gpu_io' is requested",
        ),
        (
            _ACCELERATORS.format(kind="cpu", name="mkldnn"),
            "unknown Execution Accelerator 'mkldnn' is requested",
        ),
        (
            'parameters { key: "cudnn_conv_algo_search" value { string_value: "7" } }',
            "unsupported cudnn_conv_algo_search value '7' is requested",
        ),
        (
            'parameters { key: "arena_extend_strategy" value { string_value: "two" } }',
            "failed to convert 'two' to integral number",
        ),
        (
            'parameters { key: "gpu_mem_limit" value { string_value: "-1" } }',
            "failed to convert '-1' to unsigned integral number",
        ),
    ],
)  # fmt: skip
def test_providers_bad_config_fails(text: str, message: str) -> None:
    with pytest.raises(ValueError) as info:
        choose_providers(_config(f'name: "m" {text}'), _spec("KIND_GPU"), [CUDA, CPU])
    assert str(info.value) == message


def test_providers_missing_from_build_fail_the_load() -> None:
    with pytest.raises(ValueError) as info:
        choose_providers(_config('name: "m"'), _spec("KIND_GPU"), [CPU])
    text = str(info.value)
    assert "instance 'm_0_0' needs CUDAExecutionProvider not available" in text
    assert "allow_cpu_fallback" in text and "docs/gpu.md" in text
    with pytest.raises(ValueError, match="TensorrtExecutionProvider"):
        choose_providers(_config(_TRT_CONFIG), _spec("KIND_GPU"), [CUDA, CPU])


def test_providers_missing_dropped_when_fallback_allowed(caplog: pytest.LogCaptureFixture) -> None:
    config = _config(
        _TRT_CONFIG + 'parameters { key: "allow_cpu_fallback" value { string_value: "true" } }'
    )
    with caplog.at_level(logging.WARNING):
        choice = choose_providers(config, _spec("KIND_GPU"), [CUDA, CPU])
    assert (choice.names, choice.dropped) == ([CUDA, CPU], [TENSORRT])
    assert "allow_cpu_fallback" in caplog.text


def test_providers_openvino() -> None:
    text = 'name: "m" optimization { execution_accelerators { cpu_execution_accelerator [{ name: "openvino" }] } }'  # noqa: E501
    choice = choose_providers(_config(text), _spec(), [OPENVINO, CPU])
    assert choice.providers == [(OPENVINO, {"device_type": "CPU"}), (CPU, {})]
    gpu = choose_providers(_config(text), _spec("KIND_GPU"), [CUDA, OPENVINO, CPU])
    assert gpu.names == [CUDA, OPENVINO, CPU]


# ------------------------------------------------------------- what onnxruntime really enabled


def _add_sub_repo(tmp_path: Path, extra: str = "") -> tuple[mc.ModelConfig, Path]:
    text = make_config(
        "gm", [("INPUT0", "FP32", [4]), ("INPUT1", "FP32", [4])],
        [("OUTPUT0", "FP32", [4]), ("OUTPUT1", "FP32", [4])], max_batch_size=4,
        instance_kind="KIND_GPU",
    ) + extra  # fmt: skip
    write_model(tmp_path, "gm", add_sub_model("FP32", ["batch", 4]), text)
    return _config_file(tmp_path / "gm"), tmp_path / "gm" / "1"


def _pretend_cuda_is_listed(monkeypatch: pytest.MonkeyPatch) -> None:
    """onnxruntime-gpu without usable CUDA libraries lists CUDA, accepts it for a session
    and silently runs that session on the CPU: what the check must catch."""
    real_session = ort.InferenceSession
    real_available = ort.get_available_providers()

    def session(path: str, sess_options: object, providers: list[tuple[str, object]]) -> object:
        kept = [p for p in providers if p[0] in real_available]
        return real_session(path, sess_options=sess_options, providers=kept)

    monkeypatch.setattr(ort_backend.ort, "get_available_providers", lambda: [CUDA, CPU])
    monkeypatch.setattr(ort_backend.ort, "InferenceSession", session)


def test_silent_cpu_fallback_fails_the_instance(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config, path = _add_sub_repo(tmp_path)
    _pretend_cuda_is_listed(monkeypatch)
    with pytest.raises(ValueError) as info:
        OnnxRuntimeBackend().open(config, path, _spec("KIND_GPU", 0))
    text = str(info.value)
    assert text.startswith(
        "onnxruntime did not enable CUDAExecutionProvider for instance 'm_0_0' on GPU 0 "
        "(active: CPUExecutionProvider)"
    )
    assert "docs/gpu.md" in text and "allow_cpu_fallback" in text


def test_silent_cpu_fallback_allowed_runs_on_cpu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    config, path = _add_sub_repo(
        tmp_path, 'parameters { key: "allow_cpu_fallback" value { string_value: "true" } }\n'
    )
    _pretend_cuda_is_listed(monkeypatch)
    with caplog.at_level(logging.WARNING):
        instance = OnnxRuntimeBackend().open(config, path, _spec("KIND_GPU", 0))
    try:
        assert instance.providers == [CPU] and instance.runner is None
        a = np.ones((2, 4), np.float32)
        out = instance.execute({"INPUT0": a, "INPUT1": a}, ["OUTPUT0"])
        np.testing.assert_array_equal(out["OUTPUT0"], a + a)
    finally:
        instance.close()
    assert "did not enable CUDAExecutionProvider" in caplog.text


def test_backend_supports_gpu_follows_the_build(monkeypatch: pytest.MonkeyPatch) -> None:
    assert OnnxRuntimeBackend().supports_gpu == (CUDA in ort.get_available_providers())
    _pretend_cuda_is_listed(monkeypatch)
    assert OnnxRuntimeBackend().supports_gpu
