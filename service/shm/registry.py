"""The server's registered shared-memory regions (Triton's ``SharedMemoryManager``).

One name space for system and CUDA regions, kept sorted by name as Triton's map is, so
status lists come out in Triton's order. Regions belong to the server, not to a
connection: they stay until unregistered (or the server stops). A request holds each
region it uses (``acquire`` / ``release``); unregistering a held region fails with
Triton's "currently in use" error, so a request never finds its region gone.

Every method runs on the core's event loop thread; the lock only guards against a
caller from another thread.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Protocol

from ..errors import AlreadyExists, Internal, InvalidArgument, NotFound
from .cuda import CudaApi, load_cuda_api, open_cuda_region
from .system import open_system_region

__all__ = [
    "CUDA",
    "SYSTEM",
    "CudaRegionStatus",
    "Region",
    "SharedMemoryRegistry",
    "SystemRegionStatus",
]

log = logging.getLogger(__name__)

SYSTEM = "system"
CUDA = "cuda"
_KIND_TEXT = {SYSTEM: "system shared memory", CUDA: "CUDA shared memory"}


class Region(Protocol):
    """What a request needs of a region, system or CUDA."""

    name: str
    kind: str
    key: str
    offset: int
    byte_size: int
    device_id: int
    uses: int

    def read(self, offset: int, size: int) -> memoryview: ...

    def write(self, offset: int, data: object) -> None: ...

    def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class SystemRegionStatus:
    name: str
    key: str
    offset: int
    byte_size: int


@dataclass(frozen=True, slots=True)
class CudaRegionStatus:
    name: str
    device_id: int
    byte_size: int


class SharedMemoryRegistry:
    def __init__(self, cuda_api: CudaApi | None = None, *, load_cuda: bool = True) -> None:
        """``cuda_api``: the CUDA calls to use (tests pass a fake); by default cuda-python
        is looked for the first time a CUDA region is registered."""
        self._regions: dict[str, Region] = {}
        self._lock = threading.Lock()
        self._cuda = cuda_api
        self._load_cuda = load_cuda and cuda_api is None

    def __len__(self) -> int:
        return len(self._regions)

    # --- registration ---------------------------------------------------------------

    def _check_new(self, name: str) -> None:
        if name in self._regions:
            raise AlreadyExists(f"shared memory region '{name}' already in manager")

    def register_system(self, name: str, key: str, offset: int, byte_size: int) -> None:
        with self._lock:
            self._check_new(name)
            self._regions[name] = open_system_region(name, key, offset, byte_size)

    def register_cuda(self, name: str, raw_handle: bytes, device_id: int, byte_size: int) -> None:
        with self._lock:
            self._check_new(name)
            if self._load_cuda:
                self._cuda = load_cuda_api()
                self._load_cuda = False
            self._regions[name] = open_cuda_region(
                name, raw_handle, device_id, byte_size, self._cuda
            )

    # --- status ---------------------------------------------------------------------

    def _named(self, name: str, kind: str) -> list[Region]:
        """All regions of ``kind`` by name, or the one named (Triton's NOT_FOUND texts)."""
        if not name:
            return [r for _, r in sorted(self._regions.items()) if r.kind == kind]
        region = self._regions.get(name)
        if region is None:
            what = "cuda" if kind == CUDA else "system"
            raise NotFound(f"Unable to find {what} shared memory region: '{name}'")
        if region.kind != kind:
            raise NotFound(
                f"The region named '{name}' is registered as {_KIND_TEXT[region.kind]}, "
                f"not {_KIND_TEXT[kind]}"
            )
        return [region]

    def system_status(self, name: str = "") -> list[SystemRegionStatus]:
        with self._lock:
            return [
                SystemRegionStatus(r.name, r.key, r.offset, r.byte_size)
                for r in self._named(name, SYSTEM)
            ]

    def cuda_status(self, name: str = "") -> list[CudaRegionStatus]:
        with self._lock:
            return [
                CudaRegionStatus(r.name, r.device_id, r.byte_size) for r in self._named(name, CUDA)
            ]

    # --- unregistration -------------------------------------------------------------

    def _remove(self, name: str, kind: str) -> None:
        region = self._regions.get(name)
        if region is None or region.kind != kind:
            return  # as Triton: nothing of that kind by that name is not an error
        if region.uses:
            raise Internal(
                f"Cannot unregister shared memory region '{name}', it is currently in use."
            )
        region.close()
        del self._regions[name]

    def unregister(self, kind: str, name: str = "") -> None:
        """One region, or (empty ``name``) every region of ``kind``; those in use stay,
        and are named in the error (Triton's text, its trailing " ," included)."""
        with self._lock:
            if name:
                self._remove(name, kind)
                return
            failed = []
            for each in sorted(self._regions):
                try:
                    self._remove(each, kind)
                except Internal as exc:
                    failed.append(each)
                    log.debug("%s", exc)
            if failed:
                what = "cuda" if kind == CUDA else "system"
                message = f"Failed to unregister the following {what} shared memory regions: "
                message += "".join(f"{n} ," for n in failed)
                log.error("%s", message)
                raise Internal(message)

    def close(self) -> None:
        """Server stop: every region goes, in use or not."""
        with self._lock:
            regions, self._regions = self._regions, {}
        for region in regions.values():
            try:
                region.close()
            except Internal as exc:
                log.error("%s", exc)

    # --- use by requests ------------------------------------------------------------

    def acquire(self, name: str, offset: int, byte_size: int) -> Region:
        """Triton's ``GetMemoryInfo`` checks, then hold the region for a request (one
        ``release`` per ``acquire``). ``offset`` is relative to the registered region."""
        with self._lock:
            region = self._regions.get(name)
            if region is None:
                raise NotFound(f"Unable to find shared memory region: '{name}'")
            last = max(region.byte_size - 1, 0)
            if offset < 0 or offset > last:
                raise InvalidArgument(f"Invalid offset for shared memory region: '{name}'")
            # Triton's unsigned arithmetic: offset + byte_size - 1 wraps when both are 0.
            if byte_size < 0 or offset + byte_size == 0 or offset + byte_size - 1 > last:
                raise InvalidArgument(
                    f"Invalid offset + byte size for shared memory region: '{name}'"
                )
            region.uses += 1
            return region

    def release(self, region: Region) -> None:
        with self._lock:
            region.uses -= 1
