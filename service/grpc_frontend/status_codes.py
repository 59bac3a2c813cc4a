"""The gRPC frontend's one table from error class to status code, and the decorator using it.

A decorator applied once per RPC (rather than a server interceptor) keeps the hot path to
a single try/except: an interceptor would build a wrapped handler on every call. Every
failed request is logged here, once, with its model, version and request id (never its
tensors: messages name tensors, shapes and types, not values).

A failure is answered with ``set_code`` / ``set_details``, never ``context.abort``: abort
raises an exception whose traceback holds the handler's frame (and so the request), and
grpc keeps that exception on the call's state, which the frame references back: a cycle
that kept every refused request, 300 MB ones included, until the next garbage collection.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import grpc

from wire.heap import after_failed_request

from ..errors import ErrorCode, InvalidArgument, ServerError
from .registration import Malformed

__all__ = ["GRPC_STATUS", "grpc_errors", "log_request_error", "request_bytes"]

log = logging.getLogger(__name__)

GRPC_STATUS: dict[ErrorCode, grpc.StatusCode] = {
    ErrorCode.INVALID_ARGUMENT: grpc.StatusCode.INVALID_ARGUMENT,
    ErrorCode.NOT_FOUND: grpc.StatusCode.NOT_FOUND,
    ErrorCode.ALREADY_EXISTS: grpc.StatusCode.ALREADY_EXISTS,
    ErrorCode.UNAVAILABLE: grpc.StatusCode.UNAVAILABLE,
    ErrorCode.RESOURCE_EXHAUSTED: grpc.StatusCode.RESOURCE_EXHAUSTED,
    ErrorCode.UNIMPLEMENTED: grpc.StatusCode.UNIMPLEMENTED,
    ErrorCode.CANCELLED: grpc.StatusCode.CANCELLED,
    ErrorCode.INTERNAL: grpc.StatusCode.INTERNAL,
    ErrorCode.UNKNOWN: grpc.StatusCode.UNKNOWN,
}

Req = TypeVar("Req")
Resp = TypeVar("Resp")
Self = TypeVar("Self")


def log_request_error(
    rpc: str, request: Any, code: grpc.StatusCode, message: str, *, traceback: bool = False
) -> None:
    """One line per failed request: INTERNAL as ERROR, what the caller got wrong as WARNING."""
    model = getattr(request, "model_name", "")
    version = getattr(request, "model_version", "")
    if not model and rpc.startswith("Model"):  # metadata, config, statistics requests
        model, version = getattr(request, "name", ""), getattr(request, "version", "")
    request_id = getattr(request, "id", "")
    context = {
        "rpc": rpc,
        "model": model,
        "version": version,
        "request_id": request_id,
        "code": code.name,
    }
    log.log(
        logging.ERROR if code is grpc.StatusCode.INTERNAL else logging.WARNING,
        "%s failed (model '%s', version '%s', request id '%s'): %s: %s",
        rpc,
        model,
        version,
        request_id,
        code.name,
        message,
        exc_info=traceback,
        extra=context,
    )


def request_bytes(request: Any) -> int:
    """The request message's size on the wire (what a failed one leaves on the heap)."""
    size = getattr(request, "ByteSize", None)
    return int(size()) if size is not None else 0


def grpc_errors(
    method: Callable[[Self, Req, grpc.aio.ServicerContext[Any, Any]], Awaitable[Resp]],
) -> Callable[[Self, Req, grpc.aio.ServicerContext[Any, Any]], Awaitable[Resp]]:
    """Turn ServerError into its status; any other exception into a generic INTERNAL."""
    rpc = method.__name__

    @functools.wraps(method)
    async def wrapper(
        self: Self, request: Req, context: grpc.aio.ServicerContext[Any, Any]
    ) -> Resp:
        try:
            if request.__class__ is Malformed:  # bytes that did not parse (see wire.py)
                raise InvalidArgument(request.message)  # type: ignore[attr-defined]
            return await method(self, request, context)
        except ServerError as exc:
            code, message = GRPC_STATUS[exc.code], exc.message
            log_request_error(rpc, request, code, message)
        except Exception:
            code, message = grpc.StatusCode.INTERNAL, f"internal error in {rpc}"
            log_request_error(rpc, request, code, "unhandled error", traceback=True)
        after_failed_request(request_bytes(request))
        context.set_code(code)
        context.set_details(message)
        return None  # type: ignore[return-value]  # an error status carries no message

    return wrapper
