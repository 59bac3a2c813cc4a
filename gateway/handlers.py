"""One handler per codec: translate the HTTP request, make the RPC, translate the answer.

Handlers see a transport-neutral ``HttpRequest`` and return an ``HttpResponse``; they
know nothing of ASGI, so the HTTP server underneath could change without touching them.
The only state is the stub on the gateway's one long-lived channel: no model state, and
every answer comes from the service.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import grpc
import orjson

from inference import grpc_service_pb2 as pb
from inference import grpc_service_pb2_grpc as pb_grpc
from inference import http_route_pb2 as hr

from .binary import HEADER_LENGTH, BinaryReader, header_length, raw_binary_request, response_headers
from .compression import choose_encoding, compress
from .errors import GatewayError, rpc_error
from .generate import build_generate_request, generate_events, render_generate
from .header_forward import forward_headers
from .protojson import build_request, render_response
from .routes import Binding, Route
from .shared_memory import BODY_CHECKS
from .v1_http import V1Handlers
from .v2_json import InferCall, decode_infer, encode_infer, load_json

if TYPE_CHECKING:
    from .spans import RequestSpan

__all__ = [
    "Handlers",
    "HttpRequest",
    "HttpResponse",
    "TraceSettingHook",
    "error_response",
    "json_response",
]

#: Called with (request, answer) after each successful TraceSetting call.
TraceSettingHook = Callable[[pb.TraceSettingRequest, pb.TraceSettingResponse], None]

JSON = (b"content-type", b"application/json")
EVENT_STREAM = (b"content-type", b"text/event-stream; charset=utf-8")
_NUMPY = orjson.OPT_SERIALIZE_NUMPY
# Compress responses above this size in a worker thread (zlib releases the GIL).
_THREAD_COMPRESS_BYTES = 256 * 1024


@dataclass(slots=True)
class HttpRequest:
    """What the handlers need of an HTTP request (header names lower-case)."""

    method: str
    raw_path: bytes
    headers: dict[str, str]
    body: bytes = b""
    #: gRPC metadata sent with every call made for this request (trace context, keys).
    metadata: tuple[tuple[str, str], ...] = ()
    #: The gateway's span for this request when it is traced (inference routes only).
    trace: RequestSpan | None = None
    #: The query string, undecoded (only the v1 API reads it: ``?format=``).
    query: bytes = b""


@dataclass(slots=True)
class HttpResponse:
    """A whole body, or (``stream`` set) chunks sent as they come."""

    status: int
    body: bytes = b""
    headers: list[tuple[bytes, bytes]] = field(default_factory=lambda: [JSON])
    stream: AsyncGenerator[bytes, None] | None = None


def json_response(value: Any, status: int = 200) -> HttpResponse:
    return HttpResponse(status, orjson.dumps(value))


def error_response(error: GatewayError) -> HttpResponse:
    headers = [JSON, *((k.encode("latin-1"), v.encode("latin-1")) for k, v in error.headers)]
    return HttpResponse(error.status, orjson.dumps({"error": error.message}), headers)


class Handlers:
    """The request translators, bound to one stub of the service."""

    def __init__(
        self,
        channel: grpc.aio.Channel,
        target: str,
        on_trace_setting: TraceSettingHook | None = None,
        *,
        header_forward: re.Pattern[str] | None = None,
    ) -> None:
        self._stub = pb_grpc.GRPCInferenceServiceStub(channel)
        self._header_forward = header_forward
        self._target = target
        self._on_trace_setting = on_trace_setting
        self._v1 = V1Handlers(channel, target)

    async def handle(
        self, route: Route, binding: Binding, params: dict[str, str], request: HttpRequest
    ) -> HttpResponse:
        if route.codec == hr.HTTP_CODEC_INFER:
            return await self._infer(params, request)
        if route.codec == hr.HTTP_CODEC_GENERATE:
            return await self._generate(binding, params, request)
        if route.codec == hr.HTTP_CODEC_V1:
            status, out, headers = await self._v1.handle(route, binding, params, request)
            return HttpResponse(status, out, headers)
        body = None
        if binding.body and request.body.strip():
            body = load_json(request.body, "the request body")
        check = BODY_CHECKS.get(route.rpc)
        if check is not None:
            check(body)
        message = build_request(route, binding, params, body)
        response = await self._call(route.rpc, message, request.metadata)
        if route.rpc == "TraceSetting" and self._on_trace_setting is not None:
            # Only after the call succeeded: a rejected change changes nothing here either.
            self._on_trace_setting(cast(pb.TraceSettingRequest, message), response)
        if route.codec == hr.HTTP_CODEC_STATUS:
            return self._status(route, response)
        if not route.output_type.fields:
            return HttpResponse(200)
        return json_response(render_response(route, response))

    async def _generate(
        self, binding: Binding, params: dict[str, str], request: HttpRequest
    ) -> HttpResponse:
        """One request on ModelStreamInfer; its responses as JSON or server-sent events."""
        model, version = params["model_name"], params.get("model_version", "")
        doc = load_json(request.body, "the generate request") if request.body.strip() else {}
        metadata = await self._call(
            "ModelMetadata", pb.ModelMetadataRequest(name=model, version=version), request.metadata
        )
        trace = request.trace
        started = time.time_ns() if trace is not None else 0
        infer = build_generate_request(doc, metadata, model, version)
        if trace is not None:
            trace.phase("translate_request", started)
        call = self._stub.ModelStreamInfer(iter([infer]), metadata=request.metadata or None)
        responses = self._stream(call)
        if binding.sse:
            first = await anext(responses, None)
            status = 400 if first is not None and first.error_message else 200
            events = generate_events(_prepend(first, responses))
            return HttpResponse(status, headers=[EVENT_STREAM], stream=events)
        answers = [item async for item in responses]
        errors = [item.error_message for item in answers if item.error_message]
        if errors:
            raise GatewayError(400, errors[0])
        if len(answers) != 1:
            raise GatewayError(
                400,
                "generate expects model to produce exactly 1 response, use generate stream "
                f"for model that generates various number of responses (got {len(answers)})",
            )
        started = time.time_ns() if trace is not None else 0
        out = orjson.dumps(render_generate(answers[0].infer_response), option=_NUMPY)
        if trace is not None:
            trace.phase("translate_response", started)
        return HttpResponse(200, out)

    async def _stream(self, call: Any) -> AsyncGenerator[pb.ModelStreamInferResponse, None]:
        """The RPC's responses; an RPC failure becomes a GatewayError; closing cancels it."""
        try:
            async for item in call:
                yield item
        except grpc.aio.AioRpcError as exc:
            raise rpc_error(exc, self._target) from None
        finally:
            call.cancel()

    async def _call(self, rpc: str, message: Any, metadata: tuple[tuple[str, str], ...]) -> Any:
        try:
            return await getattr(self._stub, rpc)(message, metadata=metadata or None)
        except grpc.aio.AioRpcError as exc:
            raise rpc_error(exc, self._target) from None

    @staticmethod
    def _status(route: Route, response: Any) -> HttpResponse:
        if getattr(response, route.status_field):
            return HttpResponse(200, headers=[])
        if route.false_error:
            return error_response(GatewayError(400, route.false_error))
        return HttpResponse(400, headers=[])

    async def _infer(self, params: dict[str, str], request: HttpRequest) -> HttpResponse:
        body = request.body
        model, version = params["model_name"], params.get("model_version", "")
        trace = request.trace
        started = time.time_ns() if trace is not None else 0
        given = request.headers.get(HEADER_LENGTH)
        length = header_length(body, given)
        if given is not None and length == 0:
            metadata = await self._call(
                "ModelMetadata",
                pb.ModelMetadataRequest(name=model, version=version),
                request.metadata,
            )
            started = time.time_ns() if trace is not None else 0  # after the RPC
            call = InferCall(raw_binary_request(body, metadata, model, version), True)
        else:
            if not body:
                raise GatewayError(400, "empty request body: expected the inference request JSON")
            header = load_json(memoryview(body)[:length], "the inference request")
            call = decode_infer(header, BinaryReader(body, length, model), model, version)
        if self._header_forward is not None:  # as Triton: infer only, not generate
            forward_headers(self._header_forward, request.headers, call.request)
        if trace is not None:
            trace.phase("translate_request", started)
        response = await self._call("ModelInfer", call.request, request.metadata)
        started = time.time_ns() if trace is not None else 0
        head, parts = encode_infer(response, call)
        out = b"".join((head, *parts)) if parts else head
        headers = response_headers(len(head), bool(parts))
        encoding = choose_encoding(request.headers.get("accept-encoding"))
        if encoding is not None:
            if len(out) > _THREAD_COMPRESS_BYTES:
                out = await asyncio.to_thread(compress, out, encoding)
            else:
                out = compress(out, encoding)
            headers.append((b"content-encoding", encoding.encode("ascii")))
        if trace is not None:
            trace.phase("translate_response", started)
        return HttpResponse(200, out, headers)


async def _prepend(
    first: pb.ModelStreamInferResponse | None,
    rest: AsyncGenerator[pb.ModelStreamInferResponse, None],
) -> AsyncGenerator[pb.ModelStreamInferResponse, None]:
    try:
        if first is None:
            return
        yield first
        async for item in rest:
            yield item
    finally:
        await rest.aclose()  # closing the chain cancels the RPC at once
