"""The legacy v1 HTTP API (``/api/...``), served by calling the v1 gRPC service.

Its routes come from the ``(inference.http_route)`` options of
``nvidia.inferenceserver.GRPCService`` (protos/trtis/grpc_service.proto), codec
HTTP_CODEC_V1. As the 1.11 server: the outcome travels in the ``NV-Status`` header (a
RequestStatus in one-line text protobuf) with 200 on success and 400 on failure; an
inference reads its ``NV-InferRequest`` header (text protobuf) and the inputs' bytes
concatenated in header order, and answers with ``NV-InferResponse``, the raw outputs
concatenated in the body, then the whole response header (text, or binary with
``?format=binary``); status and repository bodies are text protobuf by default,
``?format=json`` (or ``Accept: application/json``) or ``?format=binary``.

Only the body framing is the gateway's own work (splitting the body into one
``raw_input`` per input); every other check is the service's, so both protocols answer
alike.
"""

from __future__ import annotations

import math
from typing import Any, cast
from urllib.parse import parse_qs

import grpc
import orjson
from google.protobuf import json_format, text_format
from google.protobuf.message import Message

from inference import grpc_service_pb2 as pb
from inference import grpc_service_pb2_grpc as pb_grpc
from inference import model_config_pb2 as mc
from trtis import api_pb2 as api
from trtis import grpc_service_pb2 as gs
from trtis import grpc_service_pb2_grpc as gs_grpc
from trtis import request_status_pb2 as rs
from trtis import server_status_pb2 as ss

from .errors import GatewayError, rpc_error
from .local_rpc import LocalChannel, LocalStub
from .routes import Binding, Route

__all__ = ["STATUS_HEADER", "V1Answer", "V1Handlers", "one_line"]

STATUS_HEADER = "NV-Status"
REQUEST_HEADER = "NV-InferRequest"
RESPONSE_HEADER = "NV-InferResponse"

_OCTETS = (b"content-type", b"application/octet-stream")
_TEXT = (b"content-type", b"text/plain; charset=utf-8")
_JSON = (b"content-type", b"application/json")

#: The service's gRPC status (a call that failed as a call) -> v1 RequestStatusCode.
_V1_CODES: dict[grpc.StatusCode, rs.RequestStatusCode] = {
    grpc.StatusCode.INVALID_ARGUMENT: rs.INVALID_ARG,
    grpc.StatusCode.NOT_FOUND: rs.NOT_FOUND,
    grpc.StatusCode.UNAVAILABLE: rs.UNAVAILABLE,
    grpc.StatusCode.RESOURCE_EXHAUSTED: rs.UNAVAILABLE,
    grpc.StatusCode.UNIMPLEMENTED: rs.UNSUPPORTED,
    grpc.StatusCode.ALREADY_EXISTS: rs.ALREADY_EXISTS,
    grpc.StatusCode.INTERNAL: rs.INTERNAL,
}

#: Bytes per element of the fixed-size config datatypes (TYPE_STRING has none).
_ITEM_BYTES = {
    mc.TYPE_BOOL: 1,
    mc.TYPE_UINT8: 1,
    mc.TYPE_UINT16: 2,
    mc.TYPE_UINT32: 4,
    mc.TYPE_UINT64: 8,
    mc.TYPE_INT8: 1,
    mc.TYPE_INT16: 2,
    mc.TYPE_INT32: 4,
    mc.TYPE_INT64: 8,
    mc.TYPE_FP16: 2,
    mc.TYPE_FP32: 4,
    mc.TYPE_FP64: 8,
    mc.TYPE_BF16: 2,
}

_CONTROL = {"load": gs.ModelControlRequest.LOAD, "unload": gs.ModelControlRequest.UNLOAD}


class V1Failure(Exception):
    """A v1 error found by the gateway itself (before or instead of the call)."""

    def __init__(self, code: rs.RequestStatusCode, message: str) -> None:
        super().__init__(message)
        self.status = rs.RequestStatus(code=code, msg=message)


def one_line(message: Message) -> str:
    """Text protobuf on one line (C++ ShortDebugString), ASCII only as an HTTP header value
    must be: non-ASCII text (only ever inside quoted strings) becomes octal escapes of its
    UTF-8 bytes, which text-format parsers turn back into the same string."""
    text = text_format.MessageToString(message, as_one_line=True)
    if text.isascii():
        return text
    return "".join(c if c.isascii() else "".join(f"\\{b:03o}" for b in c.encode()) for c in text)


#: (HTTP status, body, headers): handlers.py makes it its HttpResponse.
V1Answer = tuple[int, bytes, list[tuple[bytes, bytes]]]


def _answer(
    status: rs.RequestStatus,
    body: bytes = b"",
    content: tuple[bytes, bytes] | None = None,
    extra: tuple[tuple[bytes, bytes], ...] = (),
    ok: bool = True,
) -> V1Answer:
    """200 when the request succeeded (and ``ok``), else 400; NV-Status always."""
    headers = [*extra, (STATUS_HEADER.encode(), one_line(status).encode("ascii"))]
    if content is not None:
        headers.append(content)
    return (200 if ok and status.code == rs.SUCCESS else 400), body, headers


def _format(query: bytes, headers: dict[str, str]) -> str:
    values = parse_qs(query.decode("latin-1")).get("format")
    if values:
        return values[0]
    return "json" if headers.get("accept") == "application/json" else "text"


def _render(
    message: Message, fmt: str, json_allowed: bool = True
) -> tuple[bytes, tuple[bytes, bytes]]:
    if fmt == "binary":
        return message.SerializeToString(), _OCTETS
    if fmt == "json" and json_allowed:
        as_dict = json_format.MessageToDict(message)
        return orjson.dumps(as_dict), _JSON
    return text_format.MessageToString(message).encode("utf-8"), _TEXT


class V1Handlers:
    """The v1 routes' translators, bound to the gateway's one channel."""

    def __init__(
        self, channel: grpc.Channel, target: str, local: LocalChannel | None = None
    ) -> None:
        self._stub: Any = gs_grpc.GRPCServiceStub(channel)
        self._v2: Any = pb_grpc.GRPCInferenceServiceStub(channel)
        if local is not None:  # every v1 call this gateway makes is unary
            self._stub = LocalStub(local, gs.DESCRIPTOR.services_by_name["GRPCService"])
            self._v2 = LocalStub(local, pb.DESCRIPTOR.services_by_name["GRPCInferenceService"])
        self._target = target

    def handle(
        self, route: Route, binding: Binding, params: dict[str, str], request: Any
    ) -> V1Answer:
        try:
            if route.rpc == "Infer":
                return self._infer(params, request)
            return self._control(route.rpc, binding, params, request)
        except V1Failure as failure:
            if route.rpc != "Infer":
                return _answer(failure.status)
            return _answer(
                failure.status, content=_OCTETS, extra=((RESPONSE_HEADER.encode(), b""),)
            )

    def _call(self, stub: Any, rpc: str, message: Any, metadata: Any) -> Any:
        try:
            return getattr(stub, rpc)(message, metadata=metadata or None)
        except grpc.RpcError as exc:
            raise self._unreachable(exc) from None

    def _unreachable(self, exc: grpc.RpcError) -> GatewayError:
        """A call that failed as a call (the v1 RPCs report their own errors in-band): the
        gateway's error answer, with the matching NV-Status too."""
        error = rpc_error(exc, self._target)
        code = _V1_CODES.get(cast(grpc.Call, exc).code(), rs.UNKNOWN)
        status = rs.RequestStatus(code=code, msg=error.message)
        error.headers = ((STATUS_HEADER, one_line(status)),)
        return error

    # --- status, health, model control, repository, shared memory ------------------------

    def _control(
        self, rpc: str, binding: Binding, params: dict[str, str], request: Any
    ) -> V1Answer:
        fmt = _format(request.query, request.headers)
        if rpc == "Health":
            answer = self._call(
                self._stub, rpc, gs.HealthRequest(mode=params["mode"]), request.metadata
            )
            return _answer(answer.request_status, ok=answer.health)
        if rpc == "Status":
            status_request = gs.StatusRequest(model_name=params.get("model_name", ""))
            answer = self._call(self._stub, rpc, status_request, request.metadata)
            if answer.request_status.code != rs.SUCCESS:
                return _answer(answer.request_status)
            body, content = _render(answer.server_status, fmt)
            return _answer(answer.request_status, body, content)
        if rpc == "ModelControl":
            kind = _CONTROL.get(params["type"])
            if kind is None:
                raise V1Failure(rs.UNKNOWN, f"unknown action type '{params['type']}'")
            control = gs.ModelControlRequest(model_name=params["model_name"], type=kind)
            answer = self._call(self._stub, rpc, control, request.metadata)
            return _answer(answer.request_status)
        if rpc == "Repository":
            answer = self._call(self._stub, rpc, gs.RepositoryRequest(index=True), request.metadata)
            if answer.request_status.code != rs.SUCCESS:
                return _answer(answer.request_status)
            body, content = _render(answer.index, fmt, json_allowed=False)
            return _answer(answer.request_status, body, content)
        # SharedMemoryControl: list the regions, or unregister them all.
        shm = gs.SharedMemoryControlRequest
        if binding.method == "GET":
            message = shm(status=shm.Status())
        else:
            message = shm(unregister_all=shm.UnregisterAll())
        answer = self._call(self._stub, rpc, message, request.metadata)
        if binding.method != "GET" or answer.request_status.code != rs.SUCCESS:
            return _answer(answer.request_status)
        regions = answer.shared_memory_status.shared_memory_region
        body, content = _render(
            ss.SharedMemoryStatus(shared_memory_region=regions), fmt, json_allowed=False
        )
        return _answer(answer.request_status, body, content)

    # --- inference ----------------------------------------------------------------------

    def _infer(self, params: dict[str, str], request: Any) -> V1Answer:
        model = params["model_name"]
        version = params.get("model_version", "")
        if version and not version.isdigit():
            raise V1Failure(rs.INVALID_ARG, f"invalid model version '{version}' for '{model}'")
        text = request.headers.get(REQUEST_HEADER.lower())
        if text is None:
            raise V1Failure(
                rs.INVALID_ARG, f"missing the {REQUEST_HEADER} header for model '{model}'"
            )
        header = api.InferRequestHeader()
        try:
            text_format.Parse(text, header)
        except text_format.ParseError as exc:
            raise V1Failure(
                rs.INVALID_ARG, f"unable to parse the {REQUEST_HEADER} header: {exc}"
            ) from None
        sizes = self._input_sizes(model, version, header, len(request.body), request)
        body = request.body
        raw: list[bytes] = []
        offset = 0
        for given, size in zip(header.input, sizes, strict=True):
            if given.HasField("shared_memory"):
                continue  # not from the body (the service refuses it)
            if offset + size > len(body):
                missing = offset + size - len(body)
                raise V1Failure(
                    rs.INVALID_ARG,
                    f"unexpected size for input '{given.name}', expecting {missing} more "
                    f"bytes for model '{model}'",
                )
            raw.append(bytes(memoryview(body)[offset : offset + size]))  # one copy
            offset += size
        if offset != len(body):
            raise V1Failure(rs.INVALID_ARG, f"unexpected additional input data for model '{model}'")
        message = gs.InferRequest(
            model_name=model,
            model_version=int(version) if version else -1,
            meta_data=header,
            raw_input=raw,
        )
        answer = self._call(self._stub, "Infer", message, request.metadata)
        meta = answer.meta_data
        head = ((RESPONSE_HEADER.encode(), one_line(meta).encode("ascii")),)
        if answer.request_status.code != rs.SUCCESS:
            return _answer(answer.request_status, content=_OCTETS, extra=head)
        if _format(request.query, {}) == "binary":
            tail = meta.SerializeToString()
        else:
            tail = text_format.MessageToString(meta).encode("utf-8")
        body_out = b"".join((*answer.raw_output, tail))
        return _answer(answer.request_status, body_out, _OCTETS, head)

    def _input_sizes(
        self, model: str, version: str, header: api.InferRequestHeader, body: int, request: Any
    ) -> list[int]:
        """Each input's share of the body: its ``batch_byte_size``, else computed from the
        model config as v1 did (fixed-size datatypes), else the rest of the body for the
        one input left. The config is fetched only when two or more need it."""
        sizes: list[int | None] = [
            0 if i.HasField("shared_memory") else (i.batch_byte_size or None) for i in header.input
        ]
        unknown = [k for k, s in enumerate(sizes) if s is None]
        if len(unknown) > 1:
            config = self._config(model, version, request)
            for k in unknown:
                sizes[k] = _fixed_size(config, header.input[k], header.batch_size)
            unknown = [k for k, s in enumerate(sizes) if s is None]
        if len(unknown) > 1:
            name = header.input[unknown[0]].name
            raise V1Failure(
                rs.INVALID_ARG,
                f"unable to find the byte size of input '{name}' for model '{model}': give "
                f"its batch_byte_size (or dims) in the {REQUEST_HEADER} header",
            )
        if unknown:
            known = sum(s for s in sizes if s is not None)
            sizes[unknown[0]] = max(0, body - known)
        return [s or 0 for s in sizes]

    def _config(self, model: str, version: str, request: Any) -> mc.ModelConfig:
        """The model's config (v2 ModelConfig); an unknown model is a v1 failure here."""
        message = pb.ModelConfigRequest(name=model, version=version)
        try:
            answer = self._v2.ModelConfig(message, metadata=request.metadata or None)
        except grpc.RpcError as exc:
            error = rpc_error(exc, self._target)
            if error.status == 503:  # the service is unreachable: not the request's fault
                raise self._unreachable(exc) from None
            code = _V1_CODES.get(cast(grpc.Call, exc).code(), rs.UNKNOWN)
            raise V1Failure(code, error.message) from None
        config: mc.ModelConfig = answer.config
        return config


def _fixed_size(
    config: mc.ModelConfig, given: api.InferRequestHeader.Input, batch_size: int
) -> int | None:
    """v1's byte size of a fixed-size input; None where it cannot be known."""
    spec = next((i for i in config.input if i.name == given.name), None)
    if spec is None or spec.data_type not in _ITEM_BYTES:
        return None
    dims = list(given.dims) or list(spec.dims)
    if any(d < 0 for d in dims):
        return None
    batch = batch_size if config.max_batch_size > 0 else 1
    return math.prod(dims) * _ITEM_BYTES[spec.data_type] * batch
