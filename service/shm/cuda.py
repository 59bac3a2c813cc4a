"""CUDA shared-memory regions: device memory a client exported with ``cudaIpcGetMemHandle``.

Registration follows Triton's ``RegisterCUDASharedMemory``: ``cudaSetDevice(device_id)``,
``cudaIpcOpenMemHandle(handle, cudaIpcMemLazyEnablePeerAccess)``, then the allocation's
size (``cuMemGetAddressRange``) must hold ``byte_size``. cuda-python (``cuda.bindings``,
or the older ``cuda.cudart`` layout) is imported only when a CUDA region is registered.

Without a GPU, without a driver, or without cuda-python, registration fails the way
Triton's GPU build fails on such a machine: the detail is logged, the client gets
INVALID_ARGUMENT ``failed to register shared memory region: invalid args``. Status and
unregistration work everywhere (there is simply nothing registered).

Tensor bytes cross through the host: an input is copied device-to-host when the request
is bound, an output host-to-device once computed (``cudaMemcpy``, default kind: UVA).
"""

from __future__ import annotations

import ctypes
import importlib
import logging
from typing import Any

import numpy as np

from ..errors import Internal, InvalidArgument

__all__ = ["IPC_HANDLE_SIZE", "CudaApi", "CudaRegion", "load_cuda_api", "open_cuda_region"]

log = logging.getLogger(__name__)

IPC_HANDLE_SIZE = 64  # sizeof(cudaIpcMemHandle_t)
_LAZY_PEER_ACCESS = 1  # cudaIpcMemLazyEnablePeerAccess
_MEMCPY_DEFAULT = 4  # cudaMemcpyDefault


class CudaError(Exception):
    """A CUDA call failed; the message is the runtime's error string."""


class CudaApi:
    """The few CUDA calls shared memory needs, over cuda-python's runtime and driver."""

    def __init__(self, runtime: Any, driver: Any | None) -> None:
        self._rt = runtime
        self._drv = driver

    def _check(self, result: Any, call: str) -> Any:
        err = result[0]
        if int(err) != 0:
            try:
                text = self._rt.cudaGetErrorString(err)[1]
                text = text.decode() if isinstance(text, bytes) else str(text)
            except Exception:
                text = str(err)
            raise CudaError(f"{call}: {text}")
        return result[1] if len(result) > 1 else None

    def open_ipc(self, raw_handle: bytes, device_id: int) -> int:
        self._check(self._rt.cudaSetDevice(device_id), "cudaSetDevice")
        handle = self._rt.cudaIpcMemHandle_t()
        ctypes.memmove(handle.getPtr(), raw_handle, IPC_HANDLE_SIZE)
        pointer = self._check(
            self._rt.cudaIpcOpenMemHandle(handle, _LAZY_PEER_ACCESS), "cudaIpcOpenMemHandle"
        )
        return int(pointer)

    def allocation_size(self, pointer: int) -> int:
        if self._drv is None:
            raise CudaError("cuMemGetAddressRange: the CUDA driver binding is missing")
        result = self._drv.cuMemGetAddressRange(self._drv.CUdeviceptr(pointer))
        if int(result[0]) != 0:
            raise CudaError(f"cuMemGetAddressRange: {result[0]}")
        return int(result[2])

    def close_ipc(self, pointer: int) -> None:
        self._check(self._rt.cudaIpcCloseMemHandle(pointer), "cudaIpcCloseMemHandle")

    def copy(self, device_id: int, dst: int, src: int, size: int) -> None:
        """``size`` bytes from ``src`` to ``dst`` (host or device addresses)."""
        self._check(self._rt.cudaSetDevice(device_id), "cudaSetDevice")
        self._check(self._rt.cudaMemcpy(dst, src, size, _MEMCPY_DEFAULT), "cudaMemcpy")


def load_cuda_api() -> CudaApi | None:
    """cuda-python's runtime (new and old module layouts) and driver, or None."""
    for runtime_name, driver_name in (
        ("cuda.bindings.runtime", "cuda.bindings.driver"),
        ("cuda.cudart", "cuda.cuda"),
    ):
        try:
            runtime = importlib.import_module(runtime_name)
        except ImportError:
            continue
        try:
            driver: Any | None = importlib.import_module(driver_name)
        except ImportError:
            driver = None
        return CudaApi(runtime, driver)
    return None


class CudaRegion:
    """A registered CUDA region: the device pointer this process opened for it."""

    kind = "cuda"
    key = ""
    offset = 0

    def __init__(
        self, name: str, device_id: int, byte_size: int, pointer: int, api: CudaApi
    ) -> None:
        self.name = name
        self.device_id = device_id
        self.byte_size = byte_size
        self.uses = 0
        self.pointer = pointer
        self._api = api

    def read(self, offset: int, size: int) -> memoryview:
        """The bytes at ``offset``, copied to a host buffer."""
        host = np.empty(size, np.uint8)
        if size:
            self._copy(host.ctypes.data, self.pointer + offset, size)
        return host.data

    def write(self, offset: int, data: Any) -> None:
        source = data if isinstance(data, np.ndarray) else np.frombuffer(data, np.uint8)
        source = np.ascontiguousarray(source)
        if source.nbytes:
            self._copy(self.pointer + offset, source.ctypes.data, source.nbytes)

    def _copy(self, dst: int, src: int, size: int) -> None:
        try:
            self._api.copy(self.device_id, dst, src, size)
        except CudaError as exc:
            message = f"failed to copy CUDA shared memory region '{self.name}': {exc}"
            raise Internal(message) from None

    def close(self) -> None:
        try:
            self._api.close_ipc(self.pointer)
        except CudaError as exc:
            raise Internal(f"failed to close CUDA IPC handle: {exc}") from None


_INVALID = "failed to register shared memory region: invalid args"


def open_cuda_region(
    name: str, raw_handle: bytes, device_id: int, byte_size: int, api: CudaApi | None
) -> CudaRegion:
    """Open ``raw_handle`` on ``device_id``; Triton's texts for every failure."""
    if api is None:
        log.error("failed to open CUDA IPC handle: cuda-python is not installed")
        raise InvalidArgument(_INVALID)
    if len(raw_handle) != IPC_HANDLE_SIZE:
        log.error(
            "failed to open CUDA IPC handle: %d bytes given, a cudaIpcMemHandle_t has %d",
            len(raw_handle),
            IPC_HANDLE_SIZE,
        )
        raise InvalidArgument(_INVALID)
    try:
        pointer = api.open_ipc(raw_handle, device_id)
    except CudaError as exc:
        log.error("failed to open CUDA IPC handle: %s", exc)
        raise InvalidArgument(_INVALID) from None
    try:
        size = api.allocation_size(pointer)
    except CudaError as exc:
        log.error("%s", exc)
        size = -1
    if byte_size > size:
        try:
            api.close_ipc(pointer)
        except CudaError as exc:
            log.error("failed to close CUDA IPC handle: %s", exc)
        raise InvalidArgument(f"failed to register shared memory region '{name}': invalid args")
    return CudaRegion(name, device_id, byte_size, pointer, api)
