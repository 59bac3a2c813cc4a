"""GRPCInferenceService: each RPC decodes, calls the core, encodes. No logic of its own."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

import grpc

from inference import grpc_service_pb2 as pb
from inference import grpc_service_pb2_grpc as pb_grpc

from ..core.server import InferenceServer
from ..errors import ServerError, Unimplemented
from ..types import InferRequest
from .codec import (
    decode_infer_request,
    decode_load_request,
    encode_infer_response,
    encode_model_metadata,
    encode_model_statistics,
    encode_repository_index,
    encode_server_metadata,
)
from .status import grpc_errors

__all__ = ["InferenceServicer"]

log = logging.getLogger(__name__)

Context = grpc.aio.ServicerContext[Any, Any]


def _not_yet(rpc: str, extension: str) -> Unimplemented:
    return Unimplemented(f"{rpc} is not implemented by this server yet ({extension} extension)")


def _decode(request: pb.ModelInferRequest) -> InferRequest:
    """Decoding faults carry the request id prefix too, as every other request error."""
    try:
        return decode_infer_request(request)
    except ServerError as exc:
        raise exc.with_request_id(request.id) from None


class InferenceServicer(pb_grpc.GRPCInferenceServiceServicer):
    def __init__(self, core: InferenceServer, max_send_bytes: int) -> None:
        self._core = core
        self._max_send = max_send_bytes

    @grpc_errors
    async def ServerLive(
        self, request: pb.ServerLiveRequest, context: Context
    ) -> pb.ServerLiveResponse:
        return pb.ServerLiveResponse(live=self._core.is_live())

    @grpc_errors
    async def ServerReady(
        self, request: pb.ServerReadyRequest, context: Context
    ) -> pb.ServerReadyResponse:
        return pb.ServerReadyResponse(ready=self._core.is_ready())

    @grpc_errors
    async def ModelReady(
        self, request: pb.ModelReadyRequest, context: Context
    ) -> pb.ModelReadyResponse:
        return pb.ModelReadyResponse(ready=self._core.model_ready(request.name, request.version))

    @grpc_errors
    async def ServerMetadata(
        self, request: pb.ServerMetadataRequest, context: Context
    ) -> pb.ServerMetadataResponse:
        return encode_server_metadata(self._core.metadata())

    @grpc_errors
    async def ModelMetadata(
        self, request: pb.ModelMetadataRequest, context: Context
    ) -> pb.ModelMetadataResponse:
        return encode_model_metadata(self._core.model_metadata(request.name, request.version))

    @grpc_errors
    async def ModelConfig(
        self, request: pb.ModelConfigRequest, context: Context
    ) -> pb.ModelConfigResponse:
        return pb.ModelConfigResponse(config=self._core.model_config(request.name, request.version))

    @grpc_errors
    async def ModelInfer(
        self, request: pb.ModelInferRequest, context: Context
    ) -> pb.ModelInferResponse:
        response = await self._core.infer(decode_infer_request(request))
        return encode_infer_response(response, self._max_send)

    async def ModelStreamInfer(
        self, request_iterator: AsyncIterator[pb.ModelInferRequest], context: Context
    ) -> AsyncIterator[pb.ModelStreamInferResponse]:
        """Requests on one stream run concurrently; each response goes out when ready.

        Order is therefore completion order, not arrival order: clients match on ``id``.
        A failed request yields an in-band ``error_message`` and the stream goes on.
        """
        results: asyncio.Queue[pb.ModelStreamInferResponse | None] = asyncio.Queue()
        pending: set[asyncio.Task[None]] = set()

        async def serve_one(request: pb.ModelInferRequest) -> None:
            async for response in self._stream_responses(request):
                await results.put(response)

        async def read_requests() -> None:
            try:
                async for request in request_iterator:
                    task = asyncio.create_task(serve_one(request))
                    pending.add(task)
                    task.add_done_callback(pending.discard)
                if pending:
                    await asyncio.gather(*pending)
            finally:
                await results.put(None)

        reader = asyncio.create_task(read_requests())
        try:
            while (item := await results.get()) is not None:
                yield item
        finally:
            reader.cancel()
            for task in list(pending):
                task.cancel()

    async def _stream_responses(
        self, request: pb.ModelInferRequest
    ) -> AsyncIterator[pb.ModelStreamInferResponse]:
        """Every response of one request (several for decoupled models), errors in-band."""
        try:
            async for response in self._core.stream_infer(_decode(request)):
                yield pb.ModelStreamInferResponse(
                    infer_response=encode_infer_response(response, self._max_send)
                )
            return
        except ServerError as exc:
            message = exc.message  # already carries the request id prefix where it belongs
        except Exception:
            log.exception("unhandled error in ModelStreamInfer")
            message = "internal error in ModelStreamInfer"
        yield pb.ModelStreamInferResponse(
            error_message=message,
            infer_response=pb.ModelInferResponse(
                model_name=request.model_name, model_version=request.model_version, id=request.id
            ),
        )

    # RPCs that later releases implement: a clear UNIMPLEMENTED, never a hang.
    @grpc_errors
    async def ModelStatistics(
        self, request: pb.ModelStatisticsRequest, context: Context
    ) -> pb.ModelStatisticsResponse:
        return encode_model_statistics(self._core.model_statistics(request.name, request.version))

    @grpc_errors
    async def RepositoryIndex(
        self, request: pb.RepositoryIndexRequest, context: Context
    ) -> pb.RepositoryIndexResponse:
        entries = self._core.repository_index(request.repository_name, request.ready)
        return encode_repository_index(entries)

    @grpc_errors
    async def RepositoryModelLoad(
        self, request: pb.RepositoryModelLoadRequest, context: Context
    ) -> pb.RepositoryModelLoadResponse:
        override, files = decode_load_request(request)
        await self._core.load_model(request.model_name, override, files)
        return pb.RepositoryModelLoadResponse()

    @grpc_errors
    async def RepositoryModelUnload(
        self, request: pb.RepositoryModelUnloadRequest, context: Context
    ) -> pb.RepositoryModelUnloadResponse:
        dependents = request.parameters.get("unload_dependents")
        await self._core.unload_model(
            request.model_name, bool(dependents is not None and dependents.bool_param)
        )
        return pb.RepositoryModelUnloadResponse()

    @grpc_errors
    async def SystemSharedMemoryStatus(self, request: Any, context: Context) -> Any:
        raise _not_yet("SystemSharedMemoryStatus", "system_shared_memory")

    @grpc_errors
    async def SystemSharedMemoryRegister(self, request: Any, context: Context) -> Any:
        raise _not_yet("SystemSharedMemoryRegister", "system_shared_memory")

    @grpc_errors
    async def SystemSharedMemoryUnregister(self, request: Any, context: Context) -> Any:
        raise _not_yet("SystemSharedMemoryUnregister", "system_shared_memory")

    @grpc_errors
    async def CudaSharedMemoryStatus(self, request: Any, context: Context) -> Any:
        raise _not_yet("CudaSharedMemoryStatus", "cuda_shared_memory")

    @grpc_errors
    async def CudaSharedMemoryRegister(self, request: Any, context: Context) -> Any:
        raise _not_yet("CudaSharedMemoryRegister", "cuda_shared_memory")

    @grpc_errors
    async def CudaSharedMemoryUnregister(self, request: Any, context: Context) -> Any:
        raise _not_yet("CudaSharedMemoryUnregister", "cuda_shared_memory")

    @grpc_errors
    async def TraceSetting(self, request: Any, context: Context) -> Any:
        raise _not_yet("TraceSetting", "trace")

    @grpc_errors
    async def LogSettings(self, request: Any, context: Context) -> Any:
        raise _not_yet("LogSettings", "logging")
