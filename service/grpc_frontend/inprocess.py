"""The core API, tracing and log settings of this very process (``--frontends 0``).

Thin adapters from ``InferenceServer``, ``Tracing`` and ``LogControl`` to the Protocols of
``core/api.py``: the hot path (``infer``, ``stream_infer``) is the server's own bound
method, so the in-process path pays nothing for them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from inference import model_config_pb2 as mc

from ..core.api import TraceScope
from ..core.index import IndexEntry
from ..core.inference_server import InferenceServer, ModelMetadata, ServerMetadata, VersionStats
from ..shm import CudaRegionStatus, SystemRegionStatus
from ..telemetry.logs import LogControl, LogValue
from ..telemetry.spans import begin_request
from ..telemetry.tracing import Tracing

__all__ = ["LocalCore", "LocalLogs", "LocalTracing"]


class LocalCore:
    """``CoreApi`` over an ``InferenceServer`` in this process."""

    def __init__(self, server: InferenceServer) -> None:
        self.server = server
        self.infer = server.infer
        self.stream_infer = server.stream_infer
        self.start_infer = server.start_infer  # the engine's frame handler (not CoreApi)

    async def is_live(self) -> bool:
        return self.server.is_live()

    async def is_ready(self) -> bool:
        return self.server.is_ready()

    async def metadata(self) -> ServerMetadata:
        return self.server.metadata()

    async def model_ready(self, name: str, version: str = "") -> bool:
        return self.server.model_ready(name, version)

    async def model_metadata(self, name: str, version: str = "") -> ModelMetadata:
        return self.server.model_metadata(name, version)

    async def model_config(self, name: str, version: str = "") -> mc.ModelConfig:
        return self.server.model_config(name, version)

    async def model_labels(self, name: str, version: str = "") -> dict[str, tuple[str, ...]]:
        return self.server.model_labels(name, version)

    async def repository_index(
        self, repository_name: str = "", ready: bool = False
    ) -> list[IndexEntry]:
        return self.server.repository_index(repository_name, ready)

    async def load_model(
        self,
        name: str,
        override: mc.ModelConfig | None = None,
        files: dict[str, bytes] | None = None,
    ) -> None:
        await self.server.load_model(name, override, files)

    async def unload_model(self, name: str, unload_dependents: bool = False) -> None:
        await self.server.unload_model(name, unload_dependents)

    async def model_statistics(self, name: str = "", version: str = "") -> list[VersionStats]:
        return self.server.model_statistics(name, version)

    async def system_shared_memory_status(self, name: str = "") -> list[SystemRegionStatus]:
        return self.server.system_shared_memory_status(name)

    async def register_system_shared_memory(
        self, name: str, key: str, offset: int, byte_size: int
    ) -> None:
        self.server.register_system_shared_memory(name, key, offset, byte_size)

    async def unregister_system_shared_memory(self, name: str = "") -> None:
        self.server.unregister_system_shared_memory(name)

    async def cuda_shared_memory_status(self, name: str = "") -> list[CudaRegionStatus]:
        return self.server.cuda_shared_memory_status(name)

    async def register_cuda_shared_memory(
        self, name: str, raw_handle: bytes, device_id: int, byte_size: int
    ) -> None:
        self.server.register_cuda_shared_memory(name, raw_handle, device_id, byte_size)

    async def unregister_cuda_shared_memory(self, name: str = "") -> None:
        self.server.unregister_cuda_shared_memory(name)


class LocalTracing:
    """``RequestTracing`` over this process's ``Tracing``: spans are made here."""

    def __init__(self, tracing: Tracing) -> None:
        self.tracing = tracing

    @property
    def active(self) -> bool:
        return self.tracing.active

    def begin(
        self, rpc: str, request: Any, metadata: Iterable[tuple[str, Any]] | None
    ) -> TraceScope | None:
        return begin_request(self.tracing, rpc, request, metadata)

    async def update_settings(
        self, changes: Mapping[str, Sequence[str]], model: str
    ) -> dict[str, list[str]]:
        return self.tracing.update(changes, model)


class LocalLogs:
    """``LogSettingsApi`` over this process's ``LogControl``."""

    def __init__(self, logs: LogControl) -> None:
        self.logs = logs

    async def update_settings(self, changes: Mapping[str, LogValue | None]) -> dict[str, LogValue]:
        return self.logs.update(changes)
