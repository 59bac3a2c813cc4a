"""One handler per codec: translate the HTTP request, make the RPC, translate the answer.

Handlers see a transport-neutral ``HttpRequest`` and return an ``HttpResponse``; they
know nothing of sockets, so the HTTP server underneath could change without touching
them. Each runs in the thread of the request's connection and makes blocking calls on
the gateway's one long-lived channel: no model state, and every answer comes from the
service.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any, cast

import grpc

from inference import grpc_service_pb2 as pb
from inference import grpc_service_pb2_grpc as pb_grpc
from inference import http_route_pb2 as hr

from .binary import HEADER_LENGTH, BinaryReader, header_length, raw_binary_parts, response_headers
from .compression import choose_encoding, compress
from .config_json import triton_config_json
from .errors import GatewayError, rpc_error
from .generate import build_generate_request, load_generate_json
from .generate_stream import GenerateCall
from .header_forward import forward_headers
from .local_rpc import LocalChannel, LocalStub
from .messages import HttpRequest, HttpResponse, error_response, json_response
from .protojson import build_request, render_response
from .routes import Binding, Route
from .sequence_header import with_sequence_header
from .shared_memory import BODY_CHECKS
from .v1_http import V1Handlers
from .v2_json import InferCall, decode_infer, encode_infer, load_json

__all__ = ["Handlers", "TraceSettingHook"]

# The service refuses a unary infer on a decoupled model with its gRPC frontend's text;
# Triton's REST frontend says the same (501) in its own words.
_DECOUPLED_GRPC = "ModelInfer RPC doesn't support models with decoupled transaction policy"
_DECOUPLED_HTTP = "HTTP end point doesn't support models with decoupled transaction policy"

#: Called with (request, answer) after each successful TraceSetting call.
TraceSettingHook = Callable[[pb.TraceSettingRequest, pb.TraceSettingResponse], None]


class Handlers:
    """The request translators, bound to one stub of the service."""

    def __init__(
        self,
        channel: grpc.Channel,
        target: str,
        on_trace_setting: TraceSettingHook | None = None,
        on_unavailable: Callable[[], None] | None = None,
        *,
        header_forward: re.Pattern[str] | None = None,
        local: LocalChannel | None = None,
    ) -> None:
        self._stub = pb_grpc.GRPCInferenceServiceStub(channel)
        #: Unary calls: through the service's local socket where there is one.
        self._unary: Any = (
            self._stub
            if local is None
            else LocalStub(local, pb.DESCRIPTOR.services_by_name["GRPCInferenceService"])
        )
        self._local = local is not None
        self._header_forward = header_forward
        self._target = target
        self._on_trace_setting = on_trace_setting
        #: Called when a call finds the service unavailable (the channel reconnects).
        self._on_unavailable = on_unavailable
        self._v1 = V1Handlers(channel, target, local)

    def handle(
        self, route: Route, binding: Binding, params: dict[str, str], request: HttpRequest
    ) -> HttpResponse:
        if route.codec == hr.HTTP_CODEC_INFER:
            return self._infer(params, request)
        if route.codec == hr.HTTP_CODEC_GENERATE:
            return self._generate(binding, params, request)
        if route.codec == hr.HTTP_CODEC_V1:
            status, out, headers = self._v1.handle(route, binding, params, request)
            return HttpResponse(status, out, headers)
        body = None
        if binding.body and request.body.strip():
            body = load_json(request.body, "the request body")
        check = BODY_CHECKS.get(route.rpc)
        if check is not None:
            check(body)
        message = build_request(route, binding, params, body)
        response = self._call(route.rpc, message, request.metadata)
        if route.rpc == "TraceSetting" and self._on_trace_setting is not None:
            # Only after the call succeeded: a rejected change changes nothing here either.
            self._on_trace_setting(cast(pb.TraceSettingRequest, message), response)
        if route.codec == hr.HTTP_CODEC_STATUS:
            return self._status(route, response)
        if not route.output_type.fields:
            return HttpResponse(200)
        rendered = render_response(route, response)
        if route.rpc == "ModelConfig":  # Triton's REST config has its own int64 quirks
            rendered = triton_config_json(rendered)
        return json_response(rendered)

    def _generate(
        self, binding: Binding, params: dict[str, str], request: HttpRequest
    ) -> HttpResponse:
        """One request on ModelStreamInfer, checked in Triton's order: the model, the
        encoding, the JSON, the conversion."""
        model, version = params["model_name"], params.get("model_version", "")
        metadata = self._call(
            "ModelMetadata", pb.ModelMetadataRequest(name=model, version=version), request.metadata
        )
        if request.headers.get("content-encoding", "identity") not in ("identity", ""):
            raise GatewayError(400, "Unsupported content-encoding, only 'identity' is supported.")
        trace = request.trace
        started = time.time_ns() if trace is not None else 0
        infer = build_generate_request(load_generate_json(request.body), metadata, model, version)
        if trace is not None:
            trace.phase("translate_request", started)
        sticky = with_sequence_header(infer, request.metadata)
        call = GenerateCall(self._stub, infer, sticky, self._target, self._on_unavailable)
        return call.stream() if binding.sse else call.collect(trace)

    def _call(self, rpc: str, message: Any, metadata: tuple[tuple[str, str], ...]) -> Any:
        try:
            return getattr(self._unary, rpc)(message, metadata=metadata or None)
        except grpc.RpcError as exc:
            error = rpc_error(exc, self._target)
        if error.status == 503 and self._on_unavailable is not None:
            self._on_unavailable()
        try:
            raise error from None
        finally:
            # The error's traceback holds this frame; without the local the frame holds no
            # path back to the error, so no reference cycle keeps ``message`` (a refused
            # request of hundreds of MB, say) alive until the next cyclic collection.
            del error

    @staticmethod
    def _status(route: Route, response: Any) -> HttpResponse:
        if getattr(response, route.status_field):
            return HttpResponse(200, headers=[])
        if route.false_error:
            return error_response(GatewayError(400, route.false_error))
        return HttpResponse(400, headers=[])

    def _infer(self, params: dict[str, str], request: HttpRequest) -> HttpResponse:
        body = request.body
        model, version = params["model_name"], params.get("model_version", "")
        trace = request.trace
        started = time.time_ns() if trace is not None else 0
        length = header_length(body, request.headers.get(HEADER_LENGTH))
        if length == 0:  # Triton's raw binary request: the body is the one input's data
            config = self._call(
                "ModelConfig", pb.ModelConfigRequest(name=model, version=version), request.metadata
            ).config
            started = time.time_ns() if trace is not None else 0  # after the RPC
            message, raw = raw_binary_parts(body, config, model, version)
            call = InferCall(message, True, raw=[raw])
        else:
            header = load_json(memoryview(body)[:length], "the inference request")
            call = decode_infer(header, BinaryReader(body, length, model), model, version)
        if self._header_forward is not None:  # as Triton: infer only, not generate
            forward_headers(self._header_forward, request.headers, call.message)
        if trace is not None:
            trace.phase("translate_request", started)
        sticky = with_sequence_header(call.message, request.metadata)
        # The local socket takes the raw inputs where they are; a gRPC stub, one message.
        outgoing = call.outgoing if self._local else call.request
        try:
            response = self._call("ModelInfer", outgoing, sticky)
        except GatewayError as exc:
            if exc.status == 501 and exc.message == _DECOUPLED_GRPC:
                raise GatewayError(501, _DECOUPLED_HTTP) from None  # Triton's REST text
            raise
        started = time.time_ns() if trace is not None else 0
        head, parts = encode_infer(response, call)
        headers = response_headers(len(head), bool(parts))
        encoding = choose_encoding(request.headers.get("accept-encoding"))
        if encoding is not None:
            head = compress(b"".join((head, *parts)) if parts else head, encoding)
            parts = []
            headers.append((b"content-encoding", encoding.encode("ascii")))
        if trace is not None:
            trace.phase("translate_response", started)
        # The binary outputs go out from where they arrived, after the JSON head.
        return HttpResponse(200, head, headers, parts)
