"""nvidia.inferenceserver.GRPCService: the legacy v1 API, translated onto the core API.

Every RPC answers with gRPC status OK and reports its outcome in the response's
``request_status`` (code, message, server id, a per-process request number), as the 1.11
server did: nothing here aborts the call. Inference requests go through the same core
call as v2's ModelInfer (``v1_codec`` translates), so they batch together with v2
requests and share validation, sequences, statistics and metrics.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import grpc

from trtis import api_pb2 as api
from trtis import grpc_service_pb2 as gs
from trtis import grpc_service_pb2_grpc as gs_grpc
from trtis import request_status_pb2 as rs
from trtis import server_status_pb2 as ss

from .. import __version__
from ..core.api import CoreApi
from ..errors import InvalidArgument, ServerError, Unimplemented
from ..statistics import Duration
from .answers import AnswerTracker, refuse_stream
from .header_forward import forward_headers
from .status_codes import GRPC_STATUS, log_request_error
from .v1_codec import decode_v1_infer, encode_v1_infer, request_status, v1_version
from .v1_server_status import ApiStats, StatusFacts, server_status

__all__ = ["V1_SERVER_ID", "V1Servicer"]

log = logging.getLogger(__name__)

Context = grpc.aio.ServicerContext[Any, Any]
Response = TypeVar("Response")

#: The 1.11 server's default identifier (its --id), reported in every RequestStatus.
V1_SERVER_ID = "inference:0"

_INTERNAL = "internal error in {rpc}"


class V1Servicer(gs_grpc.GRPCServiceServicer):
    def __init__(
        self,
        core: CoreApi,
        max_send_bytes: int,
        server_id: str = V1_SERVER_ID,
        *,
        header_forward: re.Pattern[str] | None = None,
    ) -> None:
        self._core = core
        self._header_forward = header_forward
        self._max_send = max_send_bytes
        self._server_id = server_id
        self._ids = itertools.count(1)
        self._started = time.monotonic_ns()
        self._api = ApiStats()
        self._exiting = False
        self._closing = False
        self._readers: set[asyncio.Task[None]] = set()
        self.answers = AnswerTracker()  # shutdown: what must go out before the exit

    # --- lifecycle (called by GrpcFrontend) ---------------------------------------------

    def set_exiting(self) -> None:
        """Shutdown has begun: ServerStatus reports SERVER_EXITING from now on."""
        self._exiting = True

    def close_streams(self) -> None:
        """Shutdown, inferences drained: open streams stop reading and end."""
        self._closing = True
        for reader in list(self._readers):
            reader.cancel()

    # --- helpers ---------------------------------------------------------------------

    def _status(self, request_id: int, error: ServerError | None = None) -> rs.RequestStatus:
        return request_status(self._server_id, request_id, error)

    def refusal(self, rpc: str, message: str) -> Any:
        """The answer of a call refused by a restricted protocol (handlers/access.py)."""
        status = rs.RequestStatus(
            code=rs.UNAVAILABLE, msg=message, server_id=self._server_id, request_id=next(self._ids)
        )
        response_type = {
            "Status": gs.StatusResponse,
            "Health": gs.HealthResponse,
            "Infer": gs.InferResponse,
            "StreamInfer": gs.InferResponse,
            "ModelControl": gs.ModelControlResponse,
            "SharedMemoryControl": gs.SharedMemoryControlResponse,
            "Repository": gs.RepositoryResponse,
        }[rpc]
        return response_type(request_status=status)

    async def _answer(
        self,
        rpc: str,
        request: Any,
        work: Callable[[int], Awaitable[Response]],
        failed: Callable[[rs.RequestStatus], Response],
        counter: Duration | None = None,
    ) -> Response:
        """Run ``work``; a failure becomes ``failed(request_status)``, logged once."""
        request_id = next(self._ids)
        start = time.monotonic_ns()
        try:
            response = await work(request_id)
        except ServerError as exc:
            log_request_error(rpc, request, GRPC_STATUS[exc.code], exc.message)
            return failed(self._status(request_id, exc))
        except Exception:
            log_request_error(
                rpc, request, grpc.StatusCode.INTERNAL, "unhandled error", traceback=True
            )
            return failed(self._status(request_id, ServerError(_INTERNAL.format(rpc=rpc))))
        if counter is not None:
            counter.add(time.monotonic_ns() - start)
        return response

    # --- RPCs --------------------------------------------------------------------------

    async def Health(self, request: gs.HealthRequest, context: Context) -> gs.HealthResponse:
        async def work(request_id: int) -> gs.HealthResponse:
            if request.mode == "live":
                health = await self._core.is_live()
            elif request.mode == "ready":
                health = await self._core.is_ready()
            else:
                return gs.HealthResponse(
                    request_status=rs.RequestStatus(
                        code=rs.UNKNOWN,
                        msg=f"unknown health mode '{request.mode}'",
                        server_id=self._server_id,
                        request_id=request_id,
                    )
                )
            return gs.HealthResponse(request_status=self._status(request_id), health=health)

        return await self._answer(
            "Health",
            request,
            work,
            lambda status: gs.HealthResponse(request_status=status),
            self._api.health,
        )

    async def Status(self, request: gs.StatusRequest, context: Context) -> gs.StatusResponse:
        async def work(request_id: int) -> gs.StatusResponse:
            status = await self._server_status(request.model_name)
            return gs.StatusResponse(request_status=self._status(request_id), server_status=status)

        return await self._answer(
            "Status",
            request,
            work,
            lambda status: gs.StatusResponse(request_status=status),
            self._api.status,
        )

    async def _server_status(self, model_name: str) -> ss.ServerStatus:
        entries = await self._core.repository_index()
        if model_name:
            entries = [e for e in entries if e.name == model_name]
            if not entries:
                raise InvalidArgument(f"no status available for unknown model '{model_name}'")
        configs = {}
        for name in dict.fromkeys(e.name for e in entries):
            with contextlib.suppress(ServerError):  # none of it ready: no config to show
                configs[name] = await self._core.model_config(name)
        stats = await self._core.model_statistics(model_name) if configs or not model_name else []
        ready = ss.SERVER_EXITING if self._exiting else ss.SERVER_READY
        facts = StatusFacts(
            self._server_id, __version__, ready, time.monotonic_ns() - self._started
        )
        return server_status(facts, entries, configs, stats, self._api)

    async def Infer(self, request: gs.InferRequest, context: Context) -> gs.InferResponse:
        response = await self._infer(request, context)
        if self.answers.stopping:
            self.answers.track(context)
        return response

    async def _infer(self, request: gs.InferRequest, context: Context) -> gs.InferResponse:
        async def work(request_id: int) -> gs.InferResponse:
            version = v1_version(request.model_version)
            config = await self._core.model_config(request.model_name, version)
            core_request = decode_v1_infer(request, config)
            if self._header_forward is not None:  # --grpc-header-forward-pattern, as v2
                metadata = context.invocation_metadata() or ()
                forward_headers(self._header_forward, metadata, core_request)
            response = await self._core.infer(core_request)
            labels: dict[str, tuple[str, ...]] = {}
            if any(o.HasField("cls") for o in request.meta_data.output):
                labels = await self._core.model_labels(request.model_name, response.model_version)
            header, raw = encode_v1_infer(request, response, config, labels, self._max_send)
            return gs.InferResponse(
                request_status=self._status(request_id), meta_data=header, raw_output=raw
            )

        def failed(status: rs.RequestStatus) -> gs.InferResponse:
            # As v1: no outputs, only the request's id in the header.
            return gs.InferResponse(
                request_status=status, meta_data=api.InferResponseHeader(id=request.meta_data.id)
            )

        return await self._answer("Infer", request, work, failed)

    async def StreamInfer(
        self, request_iterator: AsyncIterator[gs.InferRequest], context: Context
    ) -> AsyncIterator[gs.InferResponse]:
        """Requests start in arrival order (a sequence's requests reach its slot in order)
        and may run concurrently; responses leave in the same order, as v1's did."""
        answers: asyncio.Queue[asyncio.Task[gs.InferResponse] | None] = asyncio.Queue()

        sent_all = False  # the client half-closed: every request it sent has been read

        async def read_requests() -> None:
            nonlocal sent_all
            try:
                async for request in request_iterator:
                    answers.put_nowait(asyncio.create_task(self._infer(request, context)))
                sent_all = True
            except asyncio.CancelledError:
                if not self._closing:
                    raise  # the stream is being torn down, not the server shutting down

        if self._closing:
            refuse_stream(context)
            return
        self.answers.track(context)  # an open stream ends before the process does
        reader = asyncio.create_task(read_requests())
        self._readers.add(reader)

        def finished(task: asyncio.Task[None]) -> None:
            self._readers.discard(task)
            answers.put_nowait(None)

        reader.add_done_callback(finished)
        pending: list[asyncio.Task[gs.InferResponse]] = []
        try:
            while (task := await answers.get()) is not None:
                pending.append(task)
                yield await task
                pending.remove(task)
            if self._closing and not sent_all:  # requests it sent may be unread
                refuse_stream(context)
        finally:
            reader.cancel()
            while not answers.empty():
                item = answers.get_nowait()
                if item is not None:
                    pending.append(item)
            for task in pending:
                task.cancel()

    async def ModelControl(
        self, request: gs.ModelControlRequest, context: Context
    ) -> gs.ModelControlResponse:
        async def work(request_id: int) -> gs.ModelControlResponse:
            if request.type == gs.ModelControlRequest.LOAD:
                await self._core.load_model(request.model_name)
            else:
                await self._core.unload_model(request.model_name)
            return gs.ModelControlResponse(request_status=self._status(request_id))

        return await self._answer(
            "ModelControl",
            request,
            work,
            lambda status: gs.ModelControlResponse(request_status=status),
            self._api.model_control,
        )

    async def Repository(
        self, request: gs.RepositoryRequest, context: Context
    ) -> gs.RepositoryResponse:
        async def work(request_id: int) -> gs.RepositoryResponse:
            if request.WhichOneof("request_type") is None:
                return gs.RepositoryResponse(
                    request_status=rs.RequestStatus(
                        code=rs.UNKNOWN,
                        msg="request type is not specified",
                        server_id=self._server_id,
                        request_id=request_id,
                    )
                )
            names = dict.fromkeys(e.name for e in await self._core.repository_index())
            index = ss.ModelRepositoryIndex(
                models=[ss.ModelRepositoryIndex.ModelEntry(name=n) for n in names]
            )
            return gs.RepositoryResponse(request_status=self._status(request_id), index=index)

        return await self._answer(
            "Repository",
            request,
            work,
            lambda status: gs.RepositoryResponse(request_status=status),
            self._api.repository,
        )

    async def SharedMemoryControl(
        self, request: gs.SharedMemoryControlRequest, context: Context
    ) -> gs.SharedMemoryControlResponse:
        """No region can be registered here (as v2's shared-memory RPCs): listing answers
        none, unregistering has nothing to do, registering is refused."""

        async def work(request_id: int) -> gs.SharedMemoryControlResponse:
            which = request.WhichOneof("shared_memory_control")
            if which == "register":
                region = request.register
                kind = region.WhichOneof("shared_memory_types")
                if kind == "cuda_shared_memory":
                    raise InvalidArgument(
                        f"failed to register CUDA shared memory region: '{region.name}', "
                        "GPUs not supported"
                    )
                raise Unimplemented(
                    f"failed to register shared memory region: '{region.name}', shared memory "
                    "is not supported by this server"
                )
            if which is None:
                raise InvalidArgument("shared memory control request type is not specified")
            response = gs.SharedMemoryControlResponse(request_status=self._status(request_id))
            if which == "status":
                response.shared_memory_status.SetInParent()
            return response

        return await self._answer(
            "SharedMemoryControl",
            request,
            work,
            lambda status: gs.SharedMemoryControlResponse(request_status=status),
            self._api.shm_control,
        )
