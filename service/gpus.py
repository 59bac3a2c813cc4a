"""Which GPUs this process may use, and how much device memory it holds on each.

Triton asks the CUDA runtime; this server asks NVML (``nvidia-ml-py``, the ``gpu``
extra), which answers without loading CUDA and therefore costs nothing on a machine
without a GPU: no package, no driver or no device all mean "no GPUs". A GPU's number
here is its CUDA ordinal, the ``gpus: [...]`` of an ``instance_group`` and the
``device_id`` of an execution provider: the position among the devices
``CUDA_VISIBLE_DEVICES`` leaves visible (``visible_devices``).

Everything here blocks on the driver: callers are the loader's worker threads and the
metrics poller, never the event loop. The inventory is read once per process and can be
replaced (``set_inventory``) so tests describe any machine.
"""

from __future__ import annotations

import importlib
import logging
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, cast

__all__ = [
    "MIN_COMPUTE_CAPABILITY",
    "Gpu",
    "GpuInventory",
    "NvmlDevices",
    "inventory",
    "set_inventory",
    "visible_devices",
]

log = logging.getLogger(__name__)

#: Triton's TRITON_MIN_COMPUTE_CAPABILITY default: older GPUs are not offered to models.
MIN_COMPUTE_CAPABILITY = 6.0


class _Process(Protocol):
    @property
    def pid(self) -> int: ...
    @property
    def usedGpuMemory(self) -> int | None: ...  # bytes; None where the driver hides it


class NvmlDevices(Protocol):
    """The part of ``pynvml`` the inventory uses."""

    def nvmlInit(self) -> None: ...
    def nvmlDeviceGetCount(self) -> int: ...
    def nvmlDeviceGetHandleByIndex(self, index: int) -> object: ...
    def nvmlDeviceGetUUID(self, handle: object) -> str | bytes: ...
    def nvmlDeviceGetName(self, handle: object) -> str | bytes: ...
    def nvmlDeviceGetCudaComputeCapability(self, handle: object) -> tuple[int, int]: ...
    def nvmlDeviceGetComputeRunningProcesses(self, handle: object) -> Sequence[_Process]: ...


def _load_pynvml() -> NvmlDevices:
    return cast(NvmlDevices, importlib.import_module("pynvml"))


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def visible_devices(cuda_visible: str | None, uuids: Sequence[str]) -> list[int]:
    """NVML indices of the GPUs CUDA may use, in CUDA's order.

    ``CUDA_VISIBLE_DEVICES`` entries are NVML indices or UUID prefixes (index order is
    NVML's PCI order, i.e. CUDA's with ``CUDA_DEVICE_ORDER=PCI_BUS_ID``); the first entry
    that matches nothing ends the list, as in CUDA.
    """
    if cuda_visible is None:
        return list(range(len(uuids)))
    out: list[int] = []
    for entry in (e.strip() for e in cuda_visible.split(",")):
        if entry.isdigit():
            matches = [int(entry)] if int(entry) < len(uuids) else []
        elif entry.startswith("GPU-"):
            matches = [i for i, uuid in enumerate(uuids) if uuid.startswith(entry)]
        else:
            matches = []
        if len(matches) != 1 or matches[0] in out:
            break
        out.append(matches[0])
    return out


@dataclass(frozen=True)
class Gpu:
    ordinal: int  # CUDA device id in this process
    uuid: str
    name: str
    compute_capability: tuple[int, int]

    @property
    def capability(self) -> float:
        major, minor = self.compute_capability
        return major + minor / 10


class GpuInventory:
    """The visible GPUs, read from NVML on first use and kept (devices do not come and go)."""

    def __init__(
        self,
        load: Callable[[], NvmlDevices] = _load_pynvml,
        cuda_visible: str | None = None,
        use_environment: bool = True,
    ) -> None:
        self._load = load
        self._cuda_visible = cuda_visible
        self._use_environment = use_environment
        self._lock = threading.Lock()
        self._nvml: NvmlDevices | None = None
        self._handles: list[object] = []
        self._gpus: list[Gpu] | None = None

    def gpus(self) -> list[Gpu]:
        with self._lock:
            if self._gpus is None:
                self._gpus = self._read()
            return list(self._gpus)

    def supported(self, min_capability: float = MIN_COMPUTE_CAPABILITY) -> list[int]:
        """CUDA ordinals of the GPUs a model may be placed on (Triton's "supported GPUs")."""
        return [g.ordinal for g in self.gpus() if g.capability >= min_capability]

    def process_memory(self, pid: int | None = None) -> dict[int, int]:
        """Device bytes the process holds per CUDA ordinal (0 where NVML cannot tell)."""
        gpus = self.gpus()
        nvml = self._nvml
        if nvml is None:
            return {}
        pid = os.getpid() if pid is None else pid
        out: dict[int, int] = {}
        for gpu, handle in zip(gpus, self._handles, strict=True):
            try:
                processes = nvml.nvmlDeviceGetComputeRunningProcesses(handle)
            except Exception as exc:  # NVMLError_NotSupported and friends
                log.debug("GPU %d: per-process memory unavailable (%s)", gpu.ordinal, exc)
                continue
            used = sum(p.usedGpuMemory or 0 for p in processes if p.pid == pid)
            out[gpu.ordinal] = used
        return out

    def _read(self) -> list[Gpu]:
        try:
            nvml = self._load()
        except ImportError:
            log.info("no GPUs: nvidia-ml-py is not installed (the 'gpu' extra)")
            return []
        try:
            nvml.nvmlInit()
            handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
            uuids = [_text(nvml.nvmlDeviceGetUUID(h)) for h in handles]
            names = [_text(nvml.nvmlDeviceGetName(h)) for h in handles]
            capabilities = [tuple(nvml.nvmlDeviceGetCudaComputeCapability(h)) for h in handles]
        except Exception as exc:  # pynvml raises NVMLError subclasses (no driver, no device)
            log.info("no GPUs: NVML is unavailable (%s)", exc)
            return []
        cuda_visible = self._cuda_visible
        if cuda_visible is None and self._use_environment:
            cuda_visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        chosen = visible_devices(cuda_visible, uuids)
        self._nvml = nvml
        self._handles = [handles[i] for i in chosen]
        gpus = []
        for ordinal, index in enumerate(chosen):
            major, minor = capabilities[index]
            gpus.append(Gpu(ordinal, uuids[index], names[index], (int(major), int(minor))))
        return gpus


_inventory: GpuInventory | None = None
_inventory_lock = threading.Lock()


def inventory() -> GpuInventory:
    """The process's inventory (NVML is first touched when a caller asks it something)."""
    global _inventory
    with _inventory_lock:
        if _inventory is None:
            _inventory = GpuInventory()
        return _inventory


def set_inventory(replacement: GpuInventory | None) -> None:
    """Replace the process's inventory (tests); None goes back to reading NVML."""
    global _inventory
    with _inventory_lock:
        _inventory = replacement
