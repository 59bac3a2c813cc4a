"""Registering servicers with grpc through request parsers that never raise.

grpc.aio answers a request whose bytes do not parse with UNKNOWN and a Python class name
(``Unexpected <class 'google.protobuf.message.DecodeError'>: ...``). Every method here is
registered with a parser that returns a ``Malformed`` stand-in instead, answered with
INVALID_ARGUMENT and a plain message: by ``grpc_errors`` and the stream's in-band errors
for the inference service (one identity check on its hot path), by a thin wrapper for the
services that do not know about ``Malformed`` (health, reflection). The parser costs one
call frame per request over grpc's own (see docs/decisions/024-hostile-input.md).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
from google.protobuf.descriptor import MethodDescriptor, ServiceDescriptor
from google.protobuf.message import Message
from google.protobuf.message_factory import GetMessageClass

__all__ = ["Codec", "Malformed", "add_service", "parser", "refusing_malformed"]

Context = grpc.aio.ServicerContext[Any, Any]


class Malformed:
    """Stands in for a request whose bytes are not the method's message."""

    __slots__ = ("message", "size")

    def __init__(self, message: str, size: int) -> None:
        self.message = message
        self.size = size

    def ByteSize(self) -> int:  # the protobuf Message method it stands in for
        return self.size


def parser(message_class: type[Message]) -> Callable[[bytes], Message | Malformed]:
    """``message_class.FromString``, returning ``Malformed`` where the bytes do not parse."""
    parse = message_class.FromString
    name = message_class.DESCRIPTOR.full_name
    text = f"unable to parse the request: the bytes are not a valid {name} message"

    def deserialize(data: bytes) -> Message | Malformed:
        try:
            return parse(data)
        except Exception:  # DecodeError, or any other parse failure: the caller's bytes
            return Malformed(text, len(data))

    return deserialize


_HANDLERS = {
    (False, False): grpc.unary_unary_rpc_method_handler,
    (False, True): grpc.unary_stream_rpc_method_handler,
    (True, False): grpc.stream_unary_rpc_method_handler,
    (True, True): grpc.stream_stream_rpc_method_handler,
}


#: A method's own (deserializer wrapper, serializer), for ``add_service``'s ``codecs``.
Codec = tuple[
    Callable[[Callable[[bytes], Any]], Callable[[bytes], Any]] | None,
    Callable[[Any], bytes] | None,
]


def add_service(
    server: grpc.aio.Server,
    service: ServiceDescriptor,
    servicer: object,
    *,
    checks_own: bool,
    codecs: dict[str, Codec] | None = None,
) -> dict[str, grpc.RpcMethodHandler[Any, Any]]:
    """Register every method of ``service`` on ``server`` (what the generated
    ``add_*Servicer_to_server`` does, with our parsers). ``checks_own``: the servicer
    answers ``Malformed`` requests itself; otherwise each method is wrapped to do so.
    ``codecs``: by method name, a wrapper of its parser and its own serializer (None:
    protobuf's). Returns the unary ones by their full path (``/package.Service/Method``),
    which the local RPC socket serves too."""
    handlers: dict[str, grpc.RpcMethodHandler[Any, Any]] = {}
    for method in service.methods:
        behaviour = getattr(servicer, method.name)
        if not checks_own:
            behaviour = refusing_malformed(method, behaviour)
        make = _HANDLERS[(method.client_streaming, method.server_streaming)]
        deserialize = parser(GetMessageClass(method.input_type))
        serialize = GetMessageClass(method.output_type).SerializeToString
        wrap, own = (codecs or {}).get(method.name, (None, None))
        handlers[method.name] = make(
            behaviour,
            request_deserializer=deserialize if wrap is None else wrap(deserialize),
            response_serializer=serialize if own is None else own,
        )
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(service.full_name, handlers),)
    )
    server.add_registered_method_handlers(service.full_name, handlers)  # type: ignore[attr-defined]
    return {
        f"/{service.full_name}/{name}": handler
        for name, handler in handlers.items()
        if handler.unary_unary is not None
    }


def _refuse(context: Context, request: Malformed) -> None:
    context.set_code(grpc.StatusCode.INVALID_ARGUMENT)
    context.set_details(request.message)


def refusing_malformed(
    method: MethodDescriptor, behaviour: Callable[..., Any]
) -> Callable[..., Any]:
    """``behaviour`` that answers a ``Malformed`` request (or stream item) with
    INVALID_ARGUMENT before the servicer sees it; the calling style stays the same."""
    if method.client_streaming:
        call = behaviour

        async def checked(requests: AsyncIterator[Any], context: Context) -> AsyncIterator[Any]:
            async for request in requests:
                if isinstance(request, Malformed):
                    await context.abort(grpc.StatusCode.INVALID_ARGUMENT, request.message)
                yield request

        if inspect.isasyncgenfunction(behaviour):

            @functools.wraps(behaviour)
            async def stream_in_out(requests: Any, context: Context) -> AsyncIterator[Any]:
                async for item in call(checked(requests, context), context):
                    yield item

            return stream_in_out

        @functools.wraps(behaviour)
        async def stream_in(requests: Any, context: Context) -> Any:
            return await call(checked(requests, context), context)

        return stream_in

    if inspect.isasyncgenfunction(behaviour):

        @functools.wraps(behaviour)
        async def unary_in_stream_out(request: Any, context: Context) -> AsyncIterator[Any]:
            if isinstance(request, Malformed):
                _refuse(context, request)
                return
            async for item in behaviour(request, context):
                yield item

        return unary_in_stream_out

    @functools.wraps(behaviour)
    async def unary_in(request: Any, context: Context) -> Any:
        if isinstance(request, Malformed):
            _refuse(context, request)
            return None
        return await behaviour(request, context)

    return unary_in
