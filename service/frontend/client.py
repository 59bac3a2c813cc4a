"""EngineClient: the core API of ``core/api.py`` served by the engine process.

Inference requests travel as descriptors with their large tensors in this frontend's
slab; every other call is forwarded by method name. Each request id has one entry until
the engine's terminal message for it arrives; only then are its slab blocks reused (a
cancelled request's inputs may still be read in the engine until it says it is done).
"""

from __future__ import annotations

import asyncio
import collections
import contextvars
import functools
import itertools
import os
import socket
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any

from inference import model_config_pb2 as mc

from ..channel.framing import Channel, recv_hello, send_hello
from ..channel.leases import Leases
from ..channel.messages import (
    CALL,
    CANCEL,
    END,
    ERROR,
    EVENT,
    FREE,
    INFER,
    ITEM,
    REPLY,
    RESULT,
    STREAM,
    decode_response,
    encode_request,
)
from ..channel.slabs import DEFAULT_ARENA_BYTES, Arena, ArenaMap
from ..core.checked import Checked, ModelSnapshot
from ..core.index import IndexEntry
from ..core.inference_server import ModelMetadata, ServerMetadata, VersionStats
from ..core.shaping import shape_outputs
from ..errors import Cancelled, Internal, Unavailable
from ..scheduling.base import ExecutionResult
from ..shm import CudaRegionStatus, SystemRegionStatus
from ..telemetry.logs import LogValue
from ..types import ExecutionRecord, InferRequest, InferResponse

__all__ = ["EngineClient", "EngineLost", "RemoteLogs", "RemoteTracing"]

#: The caller's trace context (traceparent, tracestate) while a request is forwarded.
_CARRIER: contextvars.ContextVar[list[tuple[str, Any]] | None] = contextvars.ContextVar(
    "trace_carrier", default=None
)


class EngineLost(Unavailable):
    """The engine process went away (the whole server is stopping)."""


class _Pending:
    """One request id in flight: its future or stream queue, and its slab blocks;
    a unary request's also with the bytes written into each (``sources``), which an
    output the engine echoes is read from."""

    __slots__ = ("blocks", "future", "items", "sources", "waiter")

    def __init__(self) -> None:
        self.blocks: list[int] = []
        self.sources: list[tuple[int, bytes | memoryview]] | None = None
        self.future: asyncio.Future[Any] | None = None
        self.items: collections.deque[Any] | None = None
        self.waiter: asyncio.Future[None] | None = None


class EngineClient:
    """One per frontend process. ``connect`` before use."""

    def __init__(self, address: str, index: int, arena_bytes: int = DEFAULT_ARENA_BYTES) -> None:
        self._address = address
        self._index = index
        self._arena = Arena(arena_bytes, "frontend-requests")
        self._responses: ArenaMap | None = None
        self._leases: Leases | None = None  # large outputs read in place
        self._channel: Channel | None = None
        self._pending: dict[int, _Pending] = {}
        self._ids = itertools.count(1)
        self._freed: list[int] = []
        self._lost: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop  # the loop connect() ran on
        self.state: dict[str, Any] = {}
        self.models = ModelSnapshot()  # the engine's models, to validate requests against
        self.on_event: Callable[[str, Any], None] = lambda kind, value: None
        self.lost: asyncio.Future[None] | None = None

    async def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(30.0)
        await asyncio.to_thread(sock.connect, self._address)
        hello = {"index": self._index, "pid": os.getpid(), "arena_bytes": self._arena.size}
        await asyncio.to_thread(send_hello, sock, hello, [self._arena.fd])
        self.state, fds = await asyncio.to_thread(recv_hello, sock, 1)
        self._responses = ArenaMap(fds[0], self.state["arena_bytes"])
        sock.setblocking(False)
        # Bound once: asyncio.get_running_loop costs a getpid syscall per call on 3.11.
        loop = self._loop = asyncio.get_running_loop()
        self.lost = loop.create_future()
        channel = self._channel = Channel(self._received, self._on_lost)
        self._leases = Leases(self._responses, self._free_leased, loop)
        await loop.create_connection(lambda: channel, sock=sock)

    def _free_leased(self, offsets: list[int]) -> None:
        if self._channel is not None and not self._channel.closed:
            self._channel.send((FREE, offsets))

    @property
    def slab_bytes_in_use(self) -> int:
        return self._arena.in_use

    @property
    def slab_bytes_carved(self) -> int:
        return self._arena.carved

    @property
    def inflight(self) -> int:
        return len(self._pending)

    def close(self) -> None:
        if self._channel is not None:
            self._channel.close()

    # --- the channel ---------------------------------------------------------------------

    def _send(self, message: Any) -> None:
        if self._lost is not None:
            raise self._lost
        assert self._channel is not None
        self._channel.send(message)

    def _received(self, messages: list[Any]) -> None:
        assert self._responses is not None and self._leases is not None
        responses = self._responses
        freed = self._freed
        lease = self._leases.lease
        for message in messages:
            op = message[0]
            if op == EVENT:
                if message[1] == "models":
                    self.models.update(message[2])
                else:
                    self.on_event(message[1], message[2])
                continue
            entry = self._pending.get(message[1])
            if entry is None:
                continue
            if op == ITEM:
                assert entry.items is not None
                entry.items.append(decode_response(message[2], responses, freed, lease))
                self._wake(entry)
                continue
            del self._pending[message[1]]
            if op == RESULT:  # before its blocks are free: an echo may be read from them
                try:
                    echoed = functools.partial(self._echoed, entry)
                    value: Any = decode_response(message[2], responses, freed, lease, echoed)
                except (ValueError, Internal) as exc:  # an echo of no block of its own
                    op, value = ERROR, Internal(f"unreadable answer from the engine: {exc}")
            elif op == REPLY:
                value = message[2]
            elif op == END:
                value = None
            else:  # ERROR
                value = message[2] if message[2] is not None else Cancelled("request cancelled")
            free = self._arena.free
            keep_warm = op != ERROR  # a refused tensor's pages go back at once
            for offset in entry.blocks:
                free(offset, keep_warm=keep_warm)
            if entry.items is not None:
                entry.items.append(value if op == ERROR else _END)
                self._wake(entry)
            elif entry.future is not None and not entry.future.done():
                if op == ERROR:
                    entry.future.set_exception(value)
                else:
                    entry.future.set_result(value)
        if freed:
            self._channel.send((FREE, freed[:]))  # type: ignore[union-attr]
            freed.clear()

    def _echoed(self, entry: _Pending, offset: int, size: int) -> bytes | memoryview:
        """The bytes of an output the engine echoed: ``size`` bytes at ``offset`` of this
        frontend's arena, inside one of ``entry``'s input blocks. Read from what was
        written there when that is immutable (a ``bytes``, grpc's message: no copy),
        else copied out of the block (a buffer its owner might reuse)."""
        for start, source in entry.sources or ():
            view = memoryview(source)
            at = offset - start
            if at >= 0 and at + size <= view.nbytes:
                if type(view.obj) is bytes:
                    return view.cast("B")[at : at + size]
                return bytes(self._arena.view[offset : offset + size])
        raise Internal(f"echoed bytes at {offset} are in no input block of the request")

    @staticmethod
    def _wake(entry: _Pending) -> None:
        waiter = entry.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _on_lost(self, exc: Exception | None) -> None:
        self._lost = EngineLost("the server is stopping: lost the connection to the engine")
        if self._leases is not None:
            self._leases.closed = True  # blocks leased now have no engine to go back to
        pending, self._pending = self._pending, {}
        for entry in pending.values():
            if entry.items is not None:
                entry.items.append(self._lost)
                self._wake(entry)
            elif entry.future is not None and not entry.future.done():
                entry.future.set_exception(self._lost)
        if self.lost is not None and not self.lost.done():
            self.lost.set_result(None)

    def _start(
        self, op: int, request: InferRequest, entry: _Pending, checked: Checked | None = None
    ) -> int:
        rid = next(self._ids)
        try:
            values = encode_request(request, self._arena, entry.blocks, entry.sources)
            self._send((op, rid, values, _CARRIER.get(), checked))
        except BaseException:
            for offset in entry.blocks:
                self._arena.free(offset, keep_warm=False)
            raise
        self._pending[rid] = entry
        return rid

    def _cancel(self, rid: int) -> None:
        """The caller left: the engine cancels the request; its entry stays until the
        engine's terminal message frees the slab blocks."""
        entry = self._pending.get(rid)
        if entry is not None and self._lost is None:
            entry.sources = None  # no one reads the answer: its inputs' bytes may go now
            self._send((CANCEL, rid))

    # --- the inference path --------------------------------------------------------------

    async def infer(self, request: InferRequest) -> InferResponse:
        entry = _Pending()
        entry.sources = []  # the engine may echo a unary request's inputs
        future = entry.future = self._loop.create_future()
        # Validated here when this frontend can (core/checked.py): the engine's loop then
        # only builds the job, and leaves the outputs for this frontend to shape.
        mark = self.models.mark(request)
        rid = self._start(INFER, request, entry, None if mark is None else mark[0])
        try:
            result: InferResponse = await future
        except asyncio.CancelledError:
            self._cancel(rid)
            raise
        finally:
            # An error's traceback holds this frame: without these locals the frame holds
            # no path back to the error (future -> exception), so no reference cycle keeps
            # a refused request (hundreds of MB, say) alive until the next cyclic GC.
            del future, entry
        if result.unshaped:  # the engine ran the very version checked (core/shaping.py)
            assert mark is not None
            result.outputs = shape_outputs(mark[1], request, result.outputs)
            result.unshaped = False
        return result

    async def stream_infer(
        self, request: InferRequest, record: ExecutionRecord | None = None
    ) -> AsyncIterator[InferResponse]:
        """``record`` stays empty: the engine makes the spans, where the timings are."""
        entry = _Pending()
        items = entry.items = collections.deque()
        rid = self._start(STREAM, request, entry)
        loop = asyncio.get_running_loop()
        finished = False
        try:
            while True:
                while not items:
                    entry.waiter = loop.create_future()
                    await entry.waiter
                item = items.popleft()
                if item is _END:
                    finished = True
                    return
                if isinstance(item, BaseException):
                    finished = True
                    raise item
                yield item
        finally:
            item = None  # a raised error must not stay reachable from its own traceback
            if not finished:
                self._cancel(rid)

    # --- the control plane: forwarded by name --------------------------------------------

    async def call(self, name: str, *args: Any) -> Any:
        entry = _Pending()
        future = entry.future = self._loop.create_future()
        rid = next(self._ids)
        self._send((CALL, rid, name, args))
        self._pending[rid] = entry
        try:
            return await future
        except asyncio.CancelledError:
            self._cancel(rid)
            raise
        finally:
            del future, entry  # no cycle through the error's traceback (see infer)

    async def is_live(self) -> bool:
        return bool(await self.call("is_live"))

    async def is_ready(self) -> bool:
        return bool(await self.call("is_ready"))

    async def metadata(self) -> ServerMetadata:
        result: ServerMetadata = await self.call("metadata")
        return result

    async def model_ready(self, name: str, version: str = "") -> bool:
        return bool(await self.call("model_ready", name, version))

    async def model_metadata(self, name: str, version: str = "") -> ModelMetadata:
        result: ModelMetadata = await self.call("model_metadata", name, version)
        return result

    async def model_config(self, name: str, version: str = "") -> mc.ModelConfig:
        result: mc.ModelConfig = await self.call("model_config", name, version)
        return result

    async def model_labels(self, name: str, version: str = "") -> dict[str, tuple[str, ...]]:
        result: dict[str, tuple[str, ...]] = await self.call("model_labels", name, version)
        return result

    async def repository_index(
        self, repository_name: str = "", ready: bool = False
    ) -> list[IndexEntry]:
        result: list[IndexEntry] = await self.call("repository_index", repository_name, ready)
        return result

    async def load_model(
        self,
        name: str,
        override: mc.ModelConfig | None = None,
        files: dict[str, bytes] | None = None,
    ) -> None:
        await self.call("load_model", name, override, files)

    async def unload_model(self, name: str, unload_dependents: bool = False) -> None:
        await self.call("unload_model", name, unload_dependents)

    async def model_statistics(self, name: str = "", version: str = "") -> list[VersionStats]:
        result: list[VersionStats] = await self.call("model_statistics", name, version)
        return result

    async def system_shared_memory_status(self, name: str = "") -> list[SystemRegionStatus]:
        result: list[SystemRegionStatus] = await self.call("system_shared_memory_status", name)
        return result

    async def register_system_shared_memory(
        self, name: str, key: str, offset: int, byte_size: int
    ) -> None:
        await self.call("register_system_shared_memory", name, key, offset, byte_size)

    async def unregister_system_shared_memory(self, name: str = "") -> None:
        await self.call("unregister_system_shared_memory", name)

    async def cuda_shared_memory_status(self, name: str = "") -> list[CudaRegionStatus]:
        result: list[CudaRegionStatus] = await self.call("cuda_shared_memory_status", name)
        return result

    async def register_cuda_shared_memory(
        self, name: str, raw_handle: bytes, device_id: int, byte_size: int
    ) -> None:
        await self.call("register_cuda_shared_memory", name, raw_handle, device_id, byte_size)

    async def unregister_cuda_shared_memory(self, name: str = "") -> None:
        await self.call("unregister_cuda_shared_memory", name)


_END = object()


class _ForwardedTrace:
    """The servicer's trace scope in a frontend: it only hands the caller's trace context
    to the engine, which samples and makes the spans."""

    def __init__(self, carrier: list[tuple[str, Any]]) -> None:
        self.record = ExecutionRecord()
        self._carrier = carrier
        self._token: contextvars.Token[list[tuple[str, Any]] | None] | None = None

    def __enter__(self) -> _ForwardedTrace:
        self._token = _CARRIER.set(self._carrier)
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._token is not None
        _CARRIER.reset(self._token)

    def executed(self, result: ExecutionResult | None) -> None:
        pass

    def sent(self, response: InferResponse) -> None:
        pass

    def answered(self, response: InferResponse) -> None:
        pass

    def fail(self, message: str) -> None:
        pass


class RemoteTracing:
    """Tracing in a frontend: ``active`` follows the engine's settings (broadcast)."""

    def __init__(self, client: EngineClient, active: bool) -> None:
        self._client = client
        self.active = active

    def begin(
        self, rpc: str, request: Any, metadata: Iterable[tuple[str, Any]] | None
    ) -> _ForwardedTrace | None:
        carrier = [(k, v) for k, v in metadata or () if k in ("traceparent", "tracestate")]
        return _ForwardedTrace(carrier) if carrier else None

    async def update_settings(
        self, changes: Mapping[str, Sequence[str]], model: str
    ) -> dict[str, list[str]]:
        result: dict[str, list[str]] = await self._client.call("trace_settings", changes, model)
        return result


class RemoteLogs:
    """LogSettings in a frontend: the engine owns the settings and broadcasts changes."""

    def __init__(self, client: EngineClient) -> None:
        self._client = client

    async def update_settings(self, changes: Mapping[str, LogValue | None]) -> dict[str, LogValue]:
        result: dict[str, LogValue] = await self._client.call("log_settings", changes)
        return result
