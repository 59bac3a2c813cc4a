"""The core API the protocol handlers see, as Protocols both process layouts satisfy.

In one process (``--frontends 0``) the servicer talks to ``InferenceServer`` through the
thin adapters in ``grpc_frontend/inprocess.py``; with ``--frontends N`` each frontend process
talks to the engine through ``frontend/client.EngineClient``. Control-plane methods are
coroutines here because across processes every answer is a round trip; in process they
return at once. A core method added later needs one line here and one in each adapter
(the engine's dispatch reaches any ``InferenceServer`` method by name).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from inference import model_config_pb2 as mc

    from ..scheduling.base import ExecutionResult
    from ..shm import CudaRegionStatus, SystemRegionStatus
    from ..telemetry.logs import LogValue
    from ..types import ExecutionRecord, InferRequest, InferResponse
    from .index import IndexEntry
    from .inference_server import ModelMetadata, ServerMetadata, VersionStats

__all__ = ["CoreApi", "LogSettingsApi", "RequestTracing", "TraceScope"]


class CoreApi(Protocol):
    """What ``InferenceServer`` offers the handlers (see its docstrings for semantics)."""

    async def infer(self, request: InferRequest) -> InferResponse: ...

    def stream_infer(
        self, request: InferRequest, record: ExecutionRecord | None = None
    ) -> AsyncIterator[InferResponse]: ...

    async def is_live(self) -> bool: ...

    async def is_ready(self) -> bool: ...

    async def metadata(self) -> ServerMetadata: ...

    async def model_ready(self, name: str, version: str = "") -> bool: ...

    async def model_metadata(self, name: str, version: str = "") -> ModelMetadata: ...

    async def model_config(self, name: str, version: str = "") -> mc.ModelConfig: ...

    async def model_labels(self, name: str, version: str = "") -> dict[str, tuple[str, ...]]: ...

    async def repository_index(
        self, repository_name: str = "", ready: bool = False
    ) -> list[IndexEntry]: ...

    async def load_model(
        self,
        name: str,
        override: mc.ModelConfig | None = None,
        files: dict[str, bytes] | None = None,
    ) -> None: ...

    async def unload_model(self, name: str, unload_dependents: bool = False) -> None: ...

    async def model_statistics(self, name: str = "", version: str = "") -> list[VersionStats]: ...

    # Shared memory: one registry per server, in the core (the engine when split).

    async def system_shared_memory_status(self, name: str = "") -> list[SystemRegionStatus]: ...

    async def register_system_shared_memory(
        self, name: str, key: str, offset: int, byte_size: int
    ) -> None: ...

    async def unregister_system_shared_memory(self, name: str = "") -> None: ...

    async def cuda_shared_memory_status(self, name: str = "") -> list[CudaRegionStatus]: ...

    async def register_cuda_shared_memory(
        self, name: str, raw_handle: bytes, device_id: int, byte_size: int
    ) -> None: ...

    async def unregister_cuda_shared_memory(self, name: str = "") -> None: ...


class TraceScope(Protocol):
    """One traced request as the servicer drives it (``telemetry.spans.RequestTrace``)."""

    record: ExecutionRecord

    def __enter__(self) -> Any: ...

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...

    def executed(self, result: ExecutionResult | None) -> None: ...

    def sent(self, response: InferResponse) -> None: ...

    def answered(self, response: InferResponse) -> None: ...

    def fail(self, message: str) -> None: ...


class RequestTracing(Protocol):
    """Tracing as the servicer sees it: ``active`` is read first, on every request."""

    @property
    def active(self) -> bool: ...

    def begin(
        self, rpc: str, request: Any, metadata: Iterable[tuple[str, Any]] | None
    ) -> TraceScope | None: ...

    async def update_settings(
        self, changes: Mapping[str, Sequence[str]], model: str
    ) -> dict[str, list[str]]: ...


class LogSettingsApi(Protocol):
    """The LogSettings RPC's run-time settings (owned by the engine when split)."""

    async def update_settings(
        self, changes: Mapping[str, LogValue | None]
    ) -> dict[str, LogValue]: ...
