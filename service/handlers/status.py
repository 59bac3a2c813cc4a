"""The gRPC frontend's one table from error class to status code, and the decorator using it.

A decorator applied once per RPC (rather than a server interceptor) keeps the hot path to
a single try/except: an interceptor would build a wrapped handler on every call. Every
failed request is logged here, once, with its model, version and request id (never its
tensors: messages name tensors, shapes and types, not values).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import grpc

from ..errors import ErrorCode, ServerError

__all__ = ["GRPC_STATUS", "grpc_errors", "log_request_error"]

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
            return await method(self, request, context)
        except ServerError as exc:
            code, message = GRPC_STATUS[exc.code], exc.message
            log_request_error(rpc, request, code, message)
        except Exception:
            code, message = grpc.StatusCode.INTERNAL, f"internal error in {rpc}"
            log_request_error(rpc, request, code, "unhandled error", traceback=True)
        await context.abort(code, message)
        raise AssertionError("unreachable: context.abort raises")

    return wrapper
