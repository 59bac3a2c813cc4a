"""GPU metrics in Triton's names (``nv_gpu_*``, ``nv_energy_consumption``), read through NVML.

Triton reads DCGM; NVML (package ``nvidia-ml-py``, the ``gpu`` extra) gives the same
numbers without a DCGM install. The module is imported only when ``--allow-gpu-metrics``
is on; without it, without a driver, or without a GPU, no GPU metric is exported and
one INFO line says why. NVML calls block, so a daemon thread polls every
``--metrics-interval-ms`` and a scrape renders the last snapshot (Triton's "per
interval" metrics; ``poller.IntervalPoller``); the loop never waits on the driver, and a
stuck driver cannot hold the exit. The library is injectable (``load``) so tests can feed
a fake NVML.

Only the GPUs CUDA can see are reported, as Triton does (``service.gpus.visible_devices``
reads ``CUDA_VISIBLE_DEVICES``).
"""

from __future__ import annotations

import importlib
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol, cast

from ..gpus import visible_devices
from .metrics import format_number
from .poller import IntervalPoller

__all__ = ["GpuMetrics", "NvmlLibrary", "load_pynvml", "visible_devices"]

log = logging.getLogger(__name__)


class _Utilization(Protocol):
    @property
    def gpu(self) -> int: ...  # percent over the driver's last sample period


class _Memory(Protocol):
    @property
    def total(self) -> int: ...  # bytes
    @property
    def used(self) -> int: ...


class NvmlLibrary(Protocol):
    """The part of ``pynvml`` used here (units as NVML reports them)."""

    def nvmlInit(self) -> None: ...
    def nvmlShutdown(self) -> None: ...
    def nvmlDeviceGetCount(self) -> int: ...
    def nvmlDeviceGetHandleByIndex(self, index: int) -> object: ...
    def nvmlDeviceGetUUID(self, handle: object) -> str | bytes: ...
    def nvmlDeviceGetName(self, handle: object) -> str | bytes: ...
    def nvmlDeviceGetUtilizationRates(self, handle: object) -> _Utilization: ...
    def nvmlDeviceGetMemoryInfo(self, handle: object) -> _Memory: ...
    def nvmlDeviceGetPowerUsage(self, handle: object) -> int: ...  # milliwatts
    def nvmlDeviceGetPowerManagementLimit(self, handle: object) -> int: ...  # milliwatts
    def nvmlDeviceGetTotalEnergyConsumption(self, handle: object) -> int: ...  # mJ


def load_pynvml() -> NvmlLibrary:
    """The real NVML bindings; ImportError when ``nvidia-ml-py`` is not installed."""
    return cast(NvmlLibrary, importlib.import_module("pynvml"))


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


@dataclass(slots=True)
class _Device:
    index: int
    uuid: str
    handle: object
    energy_start_mj: int | None = None
    failed: set[str] = field(default_factory=set)  # fields already logged as unreadable


# (family, TYPE, HELP): Triton's families, in its order.
_FAMILIES = (
    ("nv_gpu_utilization", "gauge", "GPU utilization rate [0.0 - 1.0)"),
    ("nv_gpu_memory_total_bytes", "gauge", "GPU total memory, in bytes"),
    ("nv_gpu_memory_used_bytes", "gauge", "GPU used memory, in bytes"),
    ("nv_gpu_power_usage", "gauge", "GPU power usage in watts"),
    ("nv_gpu_power_limit", "gauge", "GPU power management limit in watts"),
    (
        "nv_energy_consumption",
        "counter",
        "GPU energy consumption in joules since the server started",
    ),
)


def _utilization(nvml: NvmlLibrary, device: _Device) -> tuple[float, ...]:
    return (nvml.nvmlDeviceGetUtilizationRates(device.handle).gpu / 100,)


def _memory(nvml: NvmlLibrary, device: _Device) -> tuple[float, ...]:
    memory = nvml.nvmlDeviceGetMemoryInfo(device.handle)
    return (memory.total, memory.used)


def _power(nvml: NvmlLibrary, device: _Device) -> tuple[float, ...]:
    return (nvml.nvmlDeviceGetPowerUsage(device.handle) / 1000,)  # mW -> W


def _power_limit(nvml: NvmlLibrary, device: _Device) -> tuple[float, ...]:
    return (nvml.nvmlDeviceGetPowerManagementLimit(device.handle) / 1000,)


def _energy(nvml: NvmlLibrary, device: _Device) -> tuple[float, ...]:
    """Joules since the first reading (NVML counts mJ since the driver loaded), as Triton."""
    total_mj = nvml.nvmlDeviceGetTotalEnergyConsumption(device.handle)
    if device.energy_start_mj is None:
        device.energy_start_mj = total_mj
    return ((total_mj - device.energy_start_mj) / 1000,)


_READERS: tuple[
    tuple[tuple[str, ...], Callable[[NvmlLibrary, _Device], tuple[float, ...]]], ...
] = (
    (("nv_gpu_utilization",), _utilization),
    (("nv_gpu_memory_total_bytes", "nv_gpu_memory_used_bytes"), _memory),
    (("nv_gpu_power_usage",), _power),
    (("nv_gpu_power_limit",), _power_limit),
    (("nv_energy_consumption",), _energy),
)


class GpuMetrics(IntervalPoller):
    """Polls NVML in a daemon thread; ``render`` gives the last snapshot as exposition text.

    ``start`` (blocking: loads and initialises NVML, reads once) returns whether any GPU
    is reported; when it returns False, ``render`` returns "" forever.
    """

    def __init__(
        self,
        interval_s: float = 2.0,
        load: Callable[[], NvmlLibrary] = load_pynvml,
        cuda_visible: str | None = None,
    ) -> None:
        super().__init__(interval_s, "gpu-metrics")
        self._load = load
        self._cuda_visible = cuda_visible
        self._nvml: NvmlLibrary | None = None
        self._devices: list[_Device] = []
        self._snapshot: dict[str, dict[str, float]] = {}  # family -> gpu_uuid -> value

    def start(self, *, poll: bool = True) -> bool:
        """Find the GPUs and take the first reading; with ``poll``, keep reading."""
        try:
            nvml = self._load()
        except ImportError:
            log.info("GPU metrics off: nvidia-ml-py is not installed (the 'gpu' extra)")
            return False
        try:
            nvml.nvmlInit()
        except Exception as exc:  # pynvml raises NVMLError subclasses
            log.info("GPU metrics off: NVML is unavailable (%s)", exc)
            return False
        try:
            handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
            uuids = [_text(nvml.nvmlDeviceGetUUID(h)) for h in handles]
            names = [_text(nvml.nvmlDeviceGetName(h)) for h in handles]
        except Exception as exc:
            log.info("GPU metrics off: NVML could not list the GPUs (%s)", exc)
            self._shutdown(nvml)
            return False
        cuda_visible = self._cuda_visible
        if cuda_visible is None:
            cuda_visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        chosen = visible_devices(cuda_visible, uuids)
        if not chosen:
            log.info("GPU metrics off: no GPU is visible")
            self._shutdown(nvml)
            return False
        self._nvml = nvml
        self._devices = [_Device(i, uuids[i], handles[i]) for i in chosen]
        for device in self._devices:
            log.info("Collecting metrics for GPU %d: %s", device.index, names[device.index])
        self.poll_once()
        if poll:
            self._start_polling()
        return True

    def stop(self) -> None:
        """Stop polling (waits briefly for the thread) and release NVML."""
        if not self._stop_polling():
            return  # a driver call hangs: leave NVML to the process exit
        if self._nvml is not None:
            self._shutdown(self._nvml)
            self._nvml = None

    @staticmethod
    def _shutdown(nvml: NvmlLibrary) -> None:
        try:
            nvml.nvmlShutdown()
        except Exception as exc:
            log.debug("nvmlShutdown failed: %s", exc)

    def poll_once(self) -> None:
        """Read every field of every device; a field NVML cannot give is left out."""
        nvml = self._nvml
        if nvml is None:
            return
        snapshot: dict[str, dict[str, float]] = {name: {} for name, _, _ in _FAMILIES}
        for device in self._devices:
            for families, read in _READERS:
                try:
                    values = read(nvml, device)
                except Exception as exc:
                    if families[0] not in device.failed:
                        device.failed.add(families[0])
                        log.info("GPU %d: %s unavailable (%s)", device.index, families[0], exc)
                    continue
                for family, value in zip(families, values, strict=True):
                    snapshot[family][device.uuid] = value
        self._snapshot = snapshot  # one reference swap: a scrape sees a whole snapshot

    def render(self) -> str:
        snapshot = self._snapshot
        lines: list[str] = []
        for name, kind, text in _FAMILIES:
            values = snapshot.get(name)
            if not values:
                continue
            lines.append(f"# HELP {name} {text}")
            lines.append(f"# TYPE {name} {kind}")
            lines.extend(
                f'{name}{{gpu_uuid="{uuid}"}} {format_number(value)}'
                for uuid, value in values.items()
            )
        return "\n".join(lines) + "\n" if lines else ""
