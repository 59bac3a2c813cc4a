"""GPU metrics: exact exposition text from a fake NVML, device selection, the "no GPU"
paths, and (only where NVML finds a GPU) a reading of the real one."""

from __future__ import annotations

import importlib
import logging
import os
import time
from dataclasses import dataclass, field

import pytest

from service.statistics import ModelStats
from service.telemetry.gpu import GpuMetrics, NvmlLibrary, load_pynvml, visible_devices
from service.telemetry.metrics import MetricsRenderer


class NVMLError(Exception):
    pass


@dataclass
class FakeGpu:
    uuid: str
    name: str = "NVIDIA Fake GPU"
    util_percent: int = 0
    total: int = 0
    used: int = 0
    power_mw: int = 0
    limit_mw: int = 0
    energy_mj: int = 0
    broken: set[str] = field(default_factory=set)


@dataclass
class Utilization:
    gpu: int


@dataclass
class Memory:
    total: int
    used: int


class FakeNvml:
    """The NvmlLibrary surface over a list of FakeGpu (handles are the FakeGpu objects)."""

    def __init__(self, gpus: list[FakeGpu], init_error: Exception | None = None) -> None:
        self.gpus = gpus
        self.init_error = init_error
        self.initialised = False
        self.shutdowns = 0

    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise self.init_error
        self.initialised = True

    def nvmlShutdown(self) -> None:
        self.shutdowns += 1

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> object:
        return self.gpus[index]

    @staticmethod
    def _gpu(handle: object, field_name: str) -> FakeGpu:
        assert isinstance(handle, FakeGpu)
        if field_name in handle.broken:
            raise NVMLError("Not Supported")
        return handle

    def nvmlDeviceGetUUID(self, handle: object) -> bytes:
        return self._gpu(handle, "uuid").uuid.encode()  # older pynvml returns bytes

    def nvmlDeviceGetName(self, handle: object) -> str:
        return self._gpu(handle, "name").name

    def nvmlDeviceGetUtilizationRates(self, handle: object) -> Utilization:
        return Utilization(self._gpu(handle, "util").util_percent)

    def nvmlDeviceGetMemoryInfo(self, handle: object) -> Memory:
        gpu = self._gpu(handle, "memory")
        return Memory(gpu.total, gpu.used)

    def nvmlDeviceGetPowerUsage(self, handle: object) -> int:
        return self._gpu(handle, "power").power_mw

    def nvmlDeviceGetPowerManagementLimit(self, handle: object) -> int:
        return self._gpu(handle, "limit").limit_mw

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: object) -> int:
        return self._gpu(handle, "energy").energy_mj


def _two_gpus() -> list[FakeGpu]:
    return [
        FakeGpu("GPU-aaaa", "NVIDIA H100", 42, 85_899_345_920, 1_073_741_824, 71_234, 700_000,
                5_000_000),
        FakeGpu("GPU-bbbb", "NVIDIA A10", 100, 24_000_000_000, 0, 15_500, 150_000, 900),
    ]  # fmt: skip


def _collector(nvml: FakeNvml, cuda_visible: str | None = None) -> GpuMetrics:
    return GpuMetrics(load=lambda: nvml, cuda_visible=cuda_visible)


def test_exposition_text_is_triton_s() -> None:
    nvml = FakeNvml(_two_gpus())
    gpu = _collector(nvml)
    assert gpu.start(poll=False)
    nvml.gpus[0].energy_mj += 2_500  # 2.5 J since the first reading
    gpu.poll_once()
    assert gpu.render() == (
        "# HELP nv_gpu_utilization GPU utilization rate [0.0 - 1.0)\n"
        "# TYPE nv_gpu_utilization gauge\n"
        'nv_gpu_utilization{gpu_uuid="GPU-aaaa"} 0.42\n'
        'nv_gpu_utilization{gpu_uuid="GPU-bbbb"} 1\n'
        "# HELP nv_gpu_memory_total_bytes GPU total memory, in bytes\n"
        "# TYPE nv_gpu_memory_total_bytes gauge\n"
        'nv_gpu_memory_total_bytes{gpu_uuid="GPU-aaaa"} 85899345920\n'
        'nv_gpu_memory_total_bytes{gpu_uuid="GPU-bbbb"} 24000000000\n'
        "# HELP nv_gpu_memory_used_bytes GPU used memory, in bytes\n"
        "# TYPE nv_gpu_memory_used_bytes gauge\n"
        'nv_gpu_memory_used_bytes{gpu_uuid="GPU-aaaa"} 1073741824\n'
        'nv_gpu_memory_used_bytes{gpu_uuid="GPU-bbbb"} 0\n'
        "# HELP nv_gpu_power_usage GPU power usage in watts\n"
        "# TYPE nv_gpu_power_usage gauge\n"
        'nv_gpu_power_usage{gpu_uuid="GPU-aaaa"} 71.234\n'
        'nv_gpu_power_usage{gpu_uuid="GPU-bbbb"} 15.5\n'
        "# HELP nv_gpu_power_limit GPU power management limit in watts\n"
        "# TYPE nv_gpu_power_limit gauge\n"
        'nv_gpu_power_limit{gpu_uuid="GPU-aaaa"} 700\n'
        'nv_gpu_power_limit{gpu_uuid="GPU-bbbb"} 150\n'
        "# HELP nv_energy_consumption GPU energy consumption in joules since the server "
        "started\n"
        "# TYPE nv_energy_consumption counter\n"
        'nv_energy_consumption{gpu_uuid="GPU-aaaa"} 2.5\n'
        'nv_energy_consumption{gpu_uuid="GPU-bbbb"} 0\n'
    )
    gpu.stop()
    assert nvml.shutdowns == 1


def test_rendered_after_the_model_metrics() -> None:
    gpu = _collector(FakeNvml(_two_gpus()))
    assert gpu.start(poll=False)

    @dataclass
    class Model:
        name: str = "m"
        version: int = 1
        stats: ModelStats = field(default_factory=ModelStats)
        scheduler: None = None

    text = MetricsRenderer(lambda: [Model()], extra=gpu.render).render().decode()
    assert text.index("nv_inference_request_success") < text.index("nv_gpu_utilization")
    assert text.endswith('nv_energy_consumption{gpu_uuid="GPU-bbbb"} 0\n')
    gpu.stop()


def test_a_field_nvml_cannot_read_is_left_out_and_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    gpus = _two_gpus()
    gpus[1].broken = {"power", "energy"}
    gpu = _collector(FakeNvml(gpus))
    with caplog.at_level(logging.INFO, logger="service.telemetry.gpu"):
        assert gpu.start(poll=False)
        gpu.poll_once()
    text = gpu.render()
    assert 'nv_gpu_power_usage{gpu_uuid="GPU-aaaa"} 71.234' in text
    assert 'nv_gpu_power_usage{gpu_uuid="GPU-bbbb"}' not in text
    assert 'nv_energy_consumption{gpu_uuid="GPU-bbbb"}' not in text
    assert 'nv_gpu_power_limit{gpu_uuid="GPU-bbbb"} 150' in text
    unavailable = [r.getMessage() for r in caplog.records if "unavailable" in r.getMessage()]
    assert unavailable == [
        "GPU 1: nv_gpu_power_usage unavailable (Not Supported)",
        "GPU 1: nv_energy_consumption unavailable (Not Supported)",
    ]
    gpu.stop()


@pytest.mark.parametrize(
    ("cuda_visible", "expected"),
    [
        (None, [0, 1, 2]),
        ("", []),
        ("-1", []),
        ("2,0", [2, 0]),
        ("1,7,0", [1]),  # the first entry that matches nothing ends the list, as in CUDA
        ("GPU-bb", [1]),
        ("GPU-cccc,0", [2, 0]),
        ("GPU-", []),  # ambiguous prefix
        ("0,0", [0]),
        ("MIG-1234", []),
    ],
)
def test_visible_devices(cuda_visible: str | None, expected: list[int]) -> None:
    assert visible_devices(cuda_visible, ["GPU-aaaa", "GPU-bbbb", "GPU-cccc"]) == expected


def test_only_cuda_visible_gpus_are_reported() -> None:
    gpu = _collector(FakeNvml(_two_gpus()), cuda_visible="1")
    assert gpu.start(poll=False)
    assert "GPU-aaaa" not in gpu.render() and "GPU-bbbb" in gpu.render()
    gpu.stop()


def _missing() -> NvmlLibrary:
    raise ImportError("No module named 'pynvml'")


@pytest.mark.parametrize(
    ("load", "reason"),
    [
        (_missing, "nvidia-ml-py is not installed"),
        (lambda: FakeNvml([], init_error=NVMLError("Driver Not Loaded")), "NVML is unavailable"),
        (lambda: FakeNvml([]), "no GPU is visible"),
    ],
    ids=["no-package", "no-driver", "no-gpu"],
)
def test_no_gpu_metrics_and_one_info_line(
    load: object, reason: str, caplog: pytest.LogCaptureFixture
) -> None:
    gpu = GpuMetrics(load=load, cuda_visible=None)  # type: ignore[arg-type]
    with caplog.at_level(logging.INFO, logger="service.telemetry.gpu"):
        assert not gpu.start()
    assert [r.levelname for r in caplog.records] == ["INFO"]
    assert reason in caplog.records[0].getMessage()
    assert gpu.render() == ""
    gpu.stop()


def test_polling_thread_follows_the_interval_and_stops() -> None:
    nvml = FakeNvml(_two_gpus())
    gpu = GpuMetrics(interval_s=0.01, load=lambda: nvml, cuda_visible=None)
    assert gpu.start()
    nvml.gpus[0].util_percent = 7
    deadline = time.monotonic() + 5
    while 'nv_gpu_utilization{gpu_uuid="GPU-aaaa"} 0.07' not in gpu.render():
        assert time.monotonic() < deadline, gpu.render()
        time.sleep(0.005)
    gpu.stop()
    assert nvml.shutdowns == 1
    assert gpu._thread is None


def _decoded(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _real_gpus() -> tuple[int, str]:
    """(GPUs NVML reports that CUDA can see, why none)."""
    try:
        importlib.import_module("pynvml")
    except ImportError:
        return 0, "nvidia-ml-py is not installed (install the 'gpu' extra)"
    nvml = load_pynvml()
    try:
        nvml.nvmlInit()
    except Exception as exc:
        return 0, f"NVML is unavailable: {exc}"
    try:
        uuids = [
            _decoded(nvml.nvmlDeviceGetUUID(nvml.nvmlDeviceGetHandleByIndex(i)))
            for i in range(nvml.nvmlDeviceGetCount())
        ]
    finally:
        nvml.nvmlShutdown()
    visible = visible_devices(os.environ.get("CUDA_VISIBLE_DEVICES"), uuids)
    return len(visible), "NVML reports no GPU that CUDA_VISIBLE_DEVICES leaves visible"


REAL_GPUS, NO_REAL_GPU = _real_gpus()


@pytest.mark.gpu
@pytest.mark.skipif(REAL_GPUS == 0, reason=NO_REAL_GPU)
def test_real_gpu_metrics() -> None:
    gpu = GpuMetrics()
    assert gpu.start(poll=False)
    try:
        lines = [line for line in gpu.render().splitlines() if not line.startswith("#")]
        by_family: dict[str, list[float]] = {}
        for line in lines:
            by_family.setdefault(line.split("{")[0], []).append(float(line.rsplit(" ", 1)[1]))
        assert len(by_family["nv_gpu_memory_total_bytes"]) == REAL_GPUS
        assert all(0.0 <= v <= 1.0 for v in by_family["nv_gpu_utilization"])
        assert all(v > 0 for v in by_family["nv_gpu_memory_total_bytes"])
        assert all('{gpu_uuid="GPU-' in line for line in lines)
    finally:
        gpu.stop()
