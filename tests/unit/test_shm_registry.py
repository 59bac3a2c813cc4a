"""service.shm: the region registry over real POSIX shared memory, and CUDA regions over a
fake CUDA API (host memory standing in for the device). Error texts are Triton's."""

from __future__ import annotations

import ctypes
import os
import uuid
from collections.abc import Iterator
from multiprocessing import shared_memory
from typing import Any

import numpy as np
import pytest

from service.errors import AlreadyExists, Internal, InvalidArgument, NotFound
from service.shm import SharedMemoryRegistry, SystemRegionStatus
from service.shm.cuda import CudaApi, CudaError, load_cuda_api
from service.shm.registry import CUDA, SYSTEM


class Segment:
    """A POSIX shared-memory object made the way tritonclient makes one."""

    def __init__(self, size: int) -> None:
        self.name = f"shmtest_{os.getpid()}_{uuid.uuid4().hex[:8]}"
        self.key = "/" + self.name
        self.shm = shared_memory.SharedMemory(self.name, create=True, size=size)

    def array(self, dtype: Any, count: int, offset: int = 0) -> np.ndarray[Any, Any]:
        return np.frombuffer(self.shm.buf, dtype, count, offset)

    def close(self) -> None:
        self.shm.close()
        self.shm.unlink()


@pytest.fixture
def segment() -> Iterator[Segment]:
    seg = Segment(3 * 4096)
    yield seg
    seg.close()


@pytest.fixture
def registry() -> Iterator[SharedMemoryRegistry]:
    reg = SharedMemoryRegistry(load_cuda=False)
    yield reg
    reg.close()


def test_register_status_unregister(registry: SharedMemoryRegistry, segment: Segment) -> None:
    registry.register_system("b", segment.key, 0, 64)
    registry.register_system("a", segment.key, 4096, 128)  # one key, two regions
    assert registry.system_status() == [  # sorted by name, as Triton's std::map
        SystemRegionStatus("a", segment.key, 4096, 128),
        SystemRegionStatus("b", segment.key, 0, 64),
    ]
    assert registry.system_status("b") == [SystemRegionStatus("b", segment.key, 0, 64)]
    assert registry.cuda_status() == []
    registry.unregister(SYSTEM, "b")
    assert [s.name for s in registry.system_status()] == ["a"]
    registry.unregister(SYSTEM)
    assert registry.system_status() == []


def test_unregister_what_is_not_there_succeeds(registry: SharedMemoryRegistry) -> None:
    """Triton: unregistering an unknown name, or all with none registered, is no error."""
    registry.unregister(SYSTEM, "ghost")
    registry.unregister(SYSTEM)
    registry.unregister(CUDA)


def test_register_errors(registry: SharedMemoryRegistry, segment: Segment) -> None:
    registry.register_system("r", segment.key, 0, 64)
    with pytest.raises(AlreadyExists, match=r"^shared memory region 'r' already in manager$"):
        registry.register_system("r", segment.key, 0, 64)
    with pytest.raises(Internal, match=r"^Unable to open shared memory region: '/no_such_key'$"):
        registry.register_system("s", "/no_such_key", 0, 64)
    with pytest.raises(Internal, match=r"^Unable to open shared memory region: ''$"):
        registry.register_system("", "", 0, 0)
    with pytest.raises(Internal, match="Unable to open"):  # libc refuses a path inside a key
        registry.register_system("s", "/../" + segment.name, 0, 64)
    outside = r"^failed to register shared memory region 's': invalid args$"
    with pytest.raises(InvalidArgument, match=outside):
        registry.register_system("s", segment.key, 0, 3 * 4096 + 1)
    with pytest.raises(InvalidArgument, match=outside):
        registry.register_system("s", segment.key, 2**63, 8)
    with pytest.raises(
        InvalidArgument,
        match=r"^failed to register shared memory region 's': unable to process address space",
    ):
        registry.register_system("s", segment.key, 0, 0)
    assert [s.name for s in registry.system_status()] == ["r"]


def test_status_errors(registry: SharedMemoryRegistry) -> None:
    with pytest.raises(NotFound, match=r"^Unable to find system shared memory region: 'x'$"):
        registry.system_status("x")
    with pytest.raises(NotFound, match=r"^Unable to find cuda shared memory region: 'x'$"):
        registry.cuda_status("x")


def test_unaligned_offset_reads_the_right_bytes(
    registry: SharedMemoryRegistry, segment: Segment
) -> None:
    """Triton refuses an offset mmap(2) cannot take; here it maps the page below."""
    segment.array(np.uint8, 3 * 4096)[:] = np.arange(3 * 4096) % 251
    registry.register_system("r", segment.key, 4100, 16)
    region = registry.acquire("r", 2, 4)
    try:
        assert bytes(region.read(2, 4)) == bytes((4102 + i) % 251 for i in range(4))
    finally:
        registry.release(region)


def test_acquire_checks(registry: SharedMemoryRegistry, segment: Segment) -> None:
    registry.register_system("r", segment.key, 0, 64)
    with pytest.raises(NotFound, match=r"^Unable to find shared memory region: 'x'$"):
        registry.acquire("x", 0, 4)
    for offset in (64, -1, 2**40):
        with pytest.raises(
            InvalidArgument, match=r"^Invalid offset for shared memory region: 'r'$"
        ):
            registry.acquire("r", offset, 1)
    for offset, size in ((60, 8), (0, 65), (0, 0), (0, -1)):
        with pytest.raises(
            InvalidArgument, match=r"^Invalid offset \+ byte size for shared memory region: 'r'$"
        ):
            registry.acquire("r", offset, size)
    registry.release(registry.acquire("r", 60, 4))  # the last 4 bytes: fine


def test_region_in_use_cannot_be_unregistered(
    registry: SharedMemoryRegistry, segment: Segment
) -> None:
    registry.register_system("busy", segment.key, 0, 64)
    registry.register_system("idle", segment.key, 64, 64)
    region = registry.acquire("busy", 0, 8)
    in_use = r"^Cannot unregister shared memory region 'busy', it is currently in use.$"
    with pytest.raises(Internal, match=in_use):
        registry.unregister(SYSTEM, "busy")
    with pytest.raises(Internal) as info:  # all: the idle one goes, the busy one is named
        registry.unregister(SYSTEM)
    assert info.value.message == (
        "Failed to unregister the following system shared memory regions: busy ,"
    )
    assert [s.name for s in registry.system_status()] == ["busy"]
    registry.release(region)
    registry.unregister(SYSTEM, "busy")
    assert registry.system_status() == []


def test_views_outlive_unregistration_safely(
    registry: SharedMemoryRegistry, segment: Segment
) -> None:
    """A view handed out before the server stopped stays readable: memory is unmapped only
    once the last view is gone, never under a reader."""
    segment.array(np.int32, 4)[:] = [1, 2, 3, 4]
    registry.register_system("r", segment.key, 0, 16)
    region = registry.acquire("r", 0, 16)
    view = np.frombuffer(region.read(0, 16), np.int32)
    registry.release(region)
    registry.close()  # the server stops
    assert view.tolist() == [1, 2, 3, 4]
    del view


def test_writes_land_in_the_object(registry: SharedMemoryRegistry, segment: Segment) -> None:
    registry.register_system("r", segment.key, 4096, 64)
    region = registry.acquire("r", 8, 16)
    try:
        region.write(8, np.arange(8, dtype=np.int16)[::2])  # a non-contiguous array
        region.write(0, b"\x07\x08")
    finally:
        registry.release(region)
    assert segment.array(np.int16, 4, 4096 + 8).tolist() == [0, 2, 4, 6]
    assert bytes(segment.shm.buf[4096 : 4096 + 2]) == b"\x07\x08"


# --------------------------------------------------------------------------------- CUDA


class FakeDevice:
    """CudaApi over host memory: IPC handles name host buffers; copies are memmoves."""

    def __init__(self, size: int = 256) -> None:
        self.memory = (ctypes.c_uint8 * size)()
        self.size = size
        self.opened: list[int] = []
        self.closed: list[int] = []
        self.fail_open = False

    def open_ipc(self, raw_handle: bytes, device_id: int) -> int:
        if self.fail_open:
            raise CudaError("cudaSetDevice: no CUDA-capable device is detected")
        pointer = ctypes.addressof(self.memory)
        self.opened.append(pointer)
        return pointer

    def allocation_size(self, pointer: int) -> int:
        return self.size

    def close_ipc(self, pointer: int) -> None:
        self.closed.append(pointer)

    def copy(self, device_id: int, dst: int, src: int, size: int) -> None:
        ctypes.memmove(dst, src, size)


HANDLE = bytes(range(64))


def test_cuda_register_status_read_write() -> None:
    device = FakeDevice()
    registry = SharedMemoryRegistry(device)  # type: ignore[arg-type]
    registry.register_cuda("g", HANDLE, 0, 128)
    assert [(s.name, s.device_id, s.byte_size) for s in registry.cuda_status()] == [("g", 0, 128)]
    assert registry.system_status() == []
    with pytest.raises(
        NotFound,
        match=r"^The region named 'g' is registered as CUDA shared memory, "
        r"not system shared memory$",
    ):
        registry.system_status("g")
    with pytest.raises(AlreadyExists):  # one name space for both kinds
        registry.register_cuda("g", HANDLE, 0, 128)
    region = registry.acquire("g", 16, 8)
    region.write(16, np.array([5, 6], np.int32))
    assert np.frombuffer(region.read(16, 8), np.int32).tolist() == [5, 6]
    registry.release(region)
    registry.unregister(SYSTEM, "g")  # the wrong kind: nothing happens, as in Triton
    assert len(registry) == 1
    registry.unregister(CUDA)
    assert device.closed == device.opened and registry.cuda_status() == []


def test_cuda_register_failures_are_tritons_invalid_args() -> None:
    invalid = r"^failed to register shared memory region: invalid args$"
    with pytest.raises(InvalidArgument, match=invalid):  # no cuda-python: no GPU here
        SharedMemoryRegistry(None, load_cuda=False).register_cuda("g", HANDLE, 0, 8)
    device = FakeDevice()
    registry = SharedMemoryRegistry(device)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match=invalid):  # not a cudaIpcMemHandle_t
        registry.register_cuda("g", b"", 0, 8)
    device.fail_open = True
    with pytest.raises(InvalidArgument, match=invalid):
        registry.register_cuda("g", HANDLE, 0, 8)
    device.fail_open = False
    with pytest.raises(
        InvalidArgument, match=r"^failed to register shared memory region 'g': invalid args$"
    ):
        registry.register_cuda("g", HANDLE, 0, device.size + 1)
    assert device.closed == device.opened  # the handle opened for the size check is closed
    assert len(registry) == 0


class FakeRuntime:
    """The slice of cuda.bindings.runtime that CudaApi calls; every call fails as it does
    on a machine without a driver, except the handle type."""

    class cudaIpcMemHandle_t:
        def __init__(self) -> None:
            self._raw = (ctypes.c_char * 64)()

        def getPtr(self) -> int:
            return ctypes.addressof(self._raw)

    def cudaSetDevice(self, device: int) -> tuple[int]:
        return (35,)

    def cudaGetErrorString(self, err: int) -> tuple[int, bytes]:
        return (0, b"CUDA driver version is insufficient for CUDA runtime version")


def test_cuda_api_reports_the_runtimes_error() -> None:
    api = CudaApi(FakeRuntime(), None)
    with pytest.raises(CudaError, match="cudaSetDevice: CUDA driver version is insufficient"):
        api.open_ipc(HANDLE, 0)
    with pytest.raises(CudaError, match="driver binding is missing"):
        api.allocation_size(1)


def test_load_cuda_api_without_cuda_python() -> None:
    try:
        import cuda  # noqa: F401
    except ImportError:
        assert load_cuda_api() is None
    else:  # pragma: no cover - an environment with the gpu extra
        assert isinstance(load_cuda_api(), CudaApi)
