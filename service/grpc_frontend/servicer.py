"""GRPCInferenceService: each RPC decodes, calls the core, encodes. No logic of its own."""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc

from inference import grpc_service_pb2 as pb
from inference import grpc_service_pb2_grpc as pb_grpc
from wire.heap import after_failed_request, after_large_success
from wire.raw_fields import SplitMessage

from ..core.api import CoreApi, LogSettingsApi, RequestTracing, TraceScope
from ..errors import InvalidArgument, ServerError, Unimplemented, failure_reason
from ..types import InferRequest
from .answers import AnswerTracker, refuse_stream
from .codec import (
    decode_infer_request,
    decode_load_request,
    encode_cuda_shm_status,
    encode_infer_response,
    encode_model_metadata,
    encode_model_statistics,
    encode_repository_index,
    encode_server_metadata,
    encode_system_shm_status,
    encode_unary_infer_response,
)
from .encoded_response import EncodedInferResponse
from .header_forward import forward_headers
from .large_messages import WireInferResponse
from .registration import Malformed
from .settings_codec import (
    decode_log_settings,
    decode_trace_settings,
    encode_log_settings,
    encode_trace_settings,
)
from .status_codes import GRPC_STATUS, grpc_errors, log_request_error, request_bytes

__all__ = ["InferenceServicer"]

log = logging.getLogger(__name__)

Context = grpc.aio.ServicerContext[Any, Any]

#: A ModelStreamInfer caller that sends this metadata (the REST gateway) gets the status
#: of each in-band error in the ``ERROR_CODE_PARAMETER`` string parameter of its
#: response, e.g. "INVALID_ARGUMENT": Triton's generate endpoints answer a request
#: refused before inference differently from a model's error response. Other callers
#: get Triton's in-band errors unchanged (message only).
ERROR_CODES_METADATA = ("gateway-error-codes", "1")
ERROR_CODE_PARAMETER = "error_code"
#: Triton's grpc stream error mode (stream_infer_handler.cc): a stream opened with this
#: metadata ends with the status of the first error a model or scheduler returns.
TRITON_GRPC_ERROR_METADATA = ("triton_grpc_error", "true")


def _not_yet(rpc: str, extension: str) -> Unimplemented:
    return Unimplemented(f"{rpc} is not implemented by this server yet ({extension} extension)")


def _decode(request: pb.ModelInferRequest | Malformed) -> InferRequest:
    if isinstance(request, Malformed):  # a stream item whose bytes did not parse
        raise InvalidArgument(request.message)
    return decode_infer_request(request)


class InferenceServicer(pb_grpc.GRPCInferenceServiceServicer):
    def __init__(
        self,
        core: CoreApi,
        max_send_bytes: int,
        *,
        logs: LogSettingsApi | None = None,
        tracing: RequestTracing | None = None,
        header_forward: re.Pattern[str] | None = None,
    ) -> None:
        self._core = core
        self._header_forward = header_forward
        self._max_send = max_send_bytes
        self._logs = logs
        self._tracing = tracing
        # After the core's, in Triton's order (trace, then logging).
        self._extensions = ("trace",) * (tracing is not None) + ("logging",) * (logs is not None)
        self._readers: set[asyncio.Task[None]] = set()
        self._closing = False
        self.answers = AnswerTracker()  # shutdown: what must go out before the exit

    def close_streams(self) -> None:
        """Shutdown, once inferences are drained: every stream stops reading, lets its
        in-flight requests finish, and ends with OK, so no idle stream holds the exit."""
        self._closing = True
        for reader in list(self._readers):
            reader.cancel()

    @grpc_errors
    async def ServerLive(
        self, request: pb.ServerLiveRequest, context: Context
    ) -> pb.ServerLiveResponse:
        return pb.ServerLiveResponse(live=await self._core.is_live())

    @grpc_errors
    async def ServerReady(
        self, request: pb.ServerReadyRequest, context: Context
    ) -> pb.ServerReadyResponse:
        return pb.ServerReadyResponse(ready=await self._core.is_ready())

    @grpc_errors
    async def ModelReady(
        self, request: pb.ModelReadyRequest, context: Context
    ) -> pb.ModelReadyResponse:
        return pb.ModelReadyResponse(
            ready=await self._core.model_ready(request.name, request.version)
        )

    @grpc_errors
    async def ServerMetadata(
        self, request: pb.ServerMetadataRequest, context: Context
    ) -> pb.ServerMetadataResponse:
        response = encode_server_metadata(await self._core.metadata())
        response.extensions.extend(e for e in self._extensions if e not in response.extensions)
        return response

    @grpc_errors
    async def ModelMetadata(
        self, request: pb.ModelMetadataRequest, context: Context
    ) -> pb.ModelMetadataResponse:
        return encode_model_metadata(await self._core.model_metadata(request.name, request.version))

    @grpc_errors
    async def ModelConfig(
        self, request: pb.ModelConfigRequest, context: Context
    ) -> pb.ModelConfigResponse:
        return pb.ModelConfigResponse(
            config=await self._core.model_config(request.name, request.version)
        )

    @grpc_errors
    async def ModelInfer(
        self, request: pb.ModelInferRequest, context: Context
    ) -> pb.ModelInferResponse | WireInferResponse | EncodedInferResponse:
        tracing = self._tracing
        if tracing is not None and tracing.active:  # the one check while tracing is off
            trace = tracing.begin("ModelInfer", request, context.invocation_metadata())
            if trace is not None:
                with trace:
                    response = await self._core.infer(self._request(request, context))
                    trace.executed(response.timings)
                    trace.answered(response)
                    if self.answers.stopping:
                        self.answers.track(context)
                    return encode_unary_infer_response(response, self._max_send)
        response = await self._core.infer(self._request(request, context))
        if self.answers.stopping:  # the one check on the hot path
            self.answers.track(context)
        if isinstance(request, SplitMessage):  # a large one: its heap warm for the next
            after_large_success(request_bytes(request))
        return encode_unary_infer_response(response, self._max_send)

    def _request(self, request: pb.ModelInferRequest, context: Context) -> InferRequest:
        """The core's request, with the metadata --grpc-header-forward-pattern selects."""
        decoded = decode_infer_request(request)
        if self._header_forward is not None:
            forward_headers(self._header_forward, context.invocation_metadata() or (), decoded)
        return decoded

    def _stream_trace(
        self, request: pb.ModelInferRequest | Malformed, context: Context
    ) -> TraceScope | None:
        tracing = self._tracing
        if tracing is None or not tracing.active or isinstance(request, Malformed):
            return None
        return tracing.begin("ModelStreamInfer", request, context.invocation_metadata())

    async def ModelStreamInfer(
        self, request_iterator: AsyncIterator[pb.ModelInferRequest], context: Context
    ) -> AsyncIterator[pb.ModelStreamInferResponse]:
        """Requests on one stream run concurrently; each response goes out when ready.

        Order is therefore completion order, not arrival order: clients match on ``id``.
        A failed request yields an in-band ``error_message`` and the stream goes on. At
        shutdown (``close_streams``) the stream stops reading and ends once its requests
        are answered: with OK if the client had finished sending, else with UNAVAILABLE,
        so that a request it sent but the server never read does not wait forever for an
        answer (Triton's shutdown ends open streams with an error too).
        """
        results: asyncio.Queue[pb.ModelStreamInferResponse | None] = asyncio.Queue()
        pending: set[asyncio.Task[None]] = set()
        sent_all = False  # the client half-closed: every request it sent has been read
        metadata = tuple(context.invocation_metadata() or ())
        codes = ERROR_CODES_METADATA in metadata
        # Triton's triton_grpc_error mode: a request failing after it was issued ends the
        # stream with its status (the first such error; nothing is written after it).
        ended: list[tuple[grpc.StatusCode, str]] = []
        end_on_error = None
        if TRITON_GRPC_ERROR_METADATA in metadata:

            def end_on_error(status: grpc.StatusCode, message: str) -> None:
                if not ended:
                    ended.append((status, message))
                    results.put_nowait(None)

        async def serve_one(request: pb.ModelInferRequest | Malformed) -> None:
            trace = self._stream_trace(request, context)
            if trace is None:
                async for response in self._stream_responses(
                    request, context, codes=codes, end_on_error=end_on_error
                ):
                    await results.put(response)
                return
            with trace:
                async for response in self._stream_responses(
                    request, context, trace, codes, end_on_error
                ):
                    await results.put(response)

        async def read_requests() -> None:
            nonlocal sent_all
            try:
                async for request in request_iterator:
                    task = asyncio.create_task(serve_one(request))
                    pending.add(task)
                    task.add_done_callback(pending.discard)
                sent_all = True
            except asyncio.CancelledError:
                if not self._closing:
                    raise  # the stream is being torn down, not the server shutting down
            finally:
                if pending:
                    await asyncio.gather(*pending, return_exceptions=True)

        if self._closing:
            refuse_stream(context)  # opened during shutdown: end at once
            return
        self.answers.track(context)  # an open stream ends before the process does
        reader = asyncio.create_task(read_requests())
        self._readers.add(reader)

        # Done (read to the end, or stopped by shutdown, its requests answered) ends the
        # stream, even if the reader was cancelled before it ever ran.
        def finished(task: asyncio.Task[None]) -> None:
            self._readers.discard(task)
            results.put_nowait(None)

        reader.add_done_callback(finished)
        try:
            while (item := await results.get()) is not None and not ended:
                yield item
            if ended:
                context.set_code(ended[0][0])
                context.set_details(ended[0][1])
            elif self._closing and not sent_all:
                refuse_stream(context)
        finally:
            reader.cancel()
            for task in list(pending):
                task.cancel()

    async def _stream_responses(
        self,
        request: pb.ModelInferRequest | Malformed,
        context: Context,
        trace: TraceScope | None = None,
        codes: bool = False,
        end_on_error: Callable[[grpc.StatusCode, str], None] | None = None,
    ) -> AsyncIterator[pb.ModelStreamInferResponse]:
        """Every response of one request (several for decoupled models), errors in-band
        (``codes``: with their status, see ERROR_CODES_METADATA).

        A ``trace`` gets the execution's timings (its record) and an event per response;
        an in-band error sets its status.
        """
        status = grpc.StatusCode.INTERNAL
        try:
            record = None if trace is None else trace.record
            decoded = _decode(request)
            if self._header_forward is not None:  # the stream's metadata, for every request
                metadata = context.invocation_metadata() or ()
                forward_headers(self._header_forward, metadata, decoded)
            async for response in self._core.stream_infer(decoded, record):
                reply = pb.ModelStreamInferResponse(
                    infer_response=encode_infer_response(response, self._max_send)
                )
                if trace is not None:
                    trace.sent(response)
                yield reply
            return
        except ServerError as exc:
            message = exc.message  # already carries the request id prefix where it belongs
            status = GRPC_STATUS[exc.code]
            log_request_error("ModelStreamInfer", request, status, message)
            if end_on_error is not None and failure_reason(exc) is not None:
                after_failed_request(request_bytes(request))
                if trace is not None:
                    trace.fail(message)
                end_on_error(status, message)
                return
        except Exception:
            message = "internal error in ModelStreamInfer"
            log_request_error(
                "ModelStreamInfer",
                request,
                grpc.StatusCode.INTERNAL,
                "unhandled error",
                traceback=True,
            )
        after_failed_request(request_bytes(request))
        if trace is not None:
            trace.fail(message)
        reply = pb.ModelStreamInferResponse(
            error_message=message,
            infer_response=pb.ModelInferResponse(
                model_name=getattr(request, "model_name", ""),  # not on Malformed
                model_version=getattr(request, "model_version", ""),
                id=getattr(request, "id", ""),
            ),
        )
        if codes:
            reply.infer_response.parameters[ERROR_CODE_PARAMETER].string_param = status.name
        yield reply

    @grpc_errors
    async def ModelStatistics(
        self, request: pb.ModelStatisticsRequest, context: Context
    ) -> pb.ModelStatisticsResponse:
        return encode_model_statistics(
            await self._core.model_statistics(request.name, request.version)
        )

    @grpc_errors
    async def RepositoryIndex(
        self, request: pb.RepositoryIndexRequest, context: Context
    ) -> pb.RepositoryIndexResponse:
        entries = await self._core.repository_index(request.repository_name, request.ready)
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

    # Shared memory: the regions live in the core (see service/shm/).
    @grpc_errors
    async def SystemSharedMemoryStatus(
        self, request: pb.SystemSharedMemoryStatusRequest, context: Context
    ) -> pb.SystemSharedMemoryStatusResponse:
        return encode_system_shm_status(await self._core.system_shared_memory_status(request.name))

    @grpc_errors
    async def SystemSharedMemoryRegister(
        self, request: pb.SystemSharedMemoryRegisterRequest, context: Context
    ) -> pb.SystemSharedMemoryRegisterResponse:
        await self._core.register_system_shared_memory(
            request.name, request.key, request.offset, request.byte_size
        )
        return pb.SystemSharedMemoryRegisterResponse()

    @grpc_errors
    async def SystemSharedMemoryUnregister(
        self, request: pb.SystemSharedMemoryUnregisterRequest, context: Context
    ) -> pb.SystemSharedMemoryUnregisterResponse:
        await self._core.unregister_system_shared_memory(request.name)
        return pb.SystemSharedMemoryUnregisterResponse()

    @grpc_errors
    async def CudaSharedMemoryStatus(
        self, request: pb.CudaSharedMemoryStatusRequest, context: Context
    ) -> pb.CudaSharedMemoryStatusResponse:
        return encode_cuda_shm_status(await self._core.cuda_shared_memory_status(request.name))

    @grpc_errors
    async def CudaSharedMemoryRegister(
        self, request: pb.CudaSharedMemoryRegisterRequest, context: Context
    ) -> pb.CudaSharedMemoryRegisterResponse:
        await self._core.register_cuda_shared_memory(
            request.name, request.raw_handle, request.device_id, request.byte_size
        )
        return pb.CudaSharedMemoryRegisterResponse()

    @grpc_errors
    async def CudaSharedMemoryUnregister(
        self, request: pb.CudaSharedMemoryUnregisterRequest, context: Context
    ) -> pb.CudaSharedMemoryUnregisterResponse:
        await self._core.unregister_cuda_shared_memory(request.name)
        return pb.CudaSharedMemoryUnregisterResponse()

    @grpc_errors
    async def TraceSetting(
        self, request: pb.TraceSettingRequest, context: Context
    ) -> pb.TraceSettingResponse:
        if self._tracing is None:
            raise _not_yet("TraceSetting", "trace")
        model = request.model_name
        if model and not await self._core.model_ready(model):
            raise InvalidArgument(f"Request for unknown model : {model}")
        settings = await self._tracing.update_settings(decode_trace_settings(request), model)
        return encode_trace_settings(settings)

    @grpc_errors
    async def LogSettings(
        self, request: pb.LogSettingsRequest, context: Context
    ) -> pb.LogSettingsResponse:
        if self._logs is None:
            raise _not_yet("LogSettings", "logging")
        return encode_log_settings(await self._logs.update_settings(decode_log_settings(request)))
