"""The gRPC frontend's one table from error class to status code, and the decorator using it.

A decorator applied once per RPC (rather than a server interceptor) keeps the hot path to
a single try/except: an interceptor would build a wrapped handler on every call.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import grpc

from ..errors import ErrorCode, ServerError

__all__ = ["GRPC_STATUS", "grpc_errors"]

log = logging.getLogger(__name__)

GRPC_STATUS: dict[ErrorCode, grpc.StatusCode] = {
    ErrorCode.INVALID_ARGUMENT: grpc.StatusCode.INVALID_ARGUMENT,
    ErrorCode.NOT_FOUND: grpc.StatusCode.NOT_FOUND,
    ErrorCode.UNAVAILABLE: grpc.StatusCode.UNAVAILABLE,
    ErrorCode.RESOURCE_EXHAUSTED: grpc.StatusCode.RESOURCE_EXHAUSTED,
    ErrorCode.UNIMPLEMENTED: grpc.StatusCode.UNIMPLEMENTED,
    ErrorCode.CANCELLED: grpc.StatusCode.CANCELLED,
    ErrorCode.INTERNAL: grpc.StatusCode.INTERNAL,
}

Req = TypeVar("Req")
Resp = TypeVar("Resp")
Self = TypeVar("Self")


def grpc_errors(
    method: Callable[[Self, Req, grpc.aio.ServicerContext[Any, Any]], Awaitable[Resp]],
) -> Callable[[Self, Req, grpc.aio.ServicerContext[Any, Any]], Awaitable[Resp]]:
    """Turn ServerError into its status; any other exception into a generic INTERNAL."""

    @functools.wraps(method)
    async def wrapper(
        self: Self, request: Req, context: grpc.aio.ServicerContext[Any, Any]
    ) -> Resp:
        try:
            return await method(self, request, context)
        except ServerError as exc:
            code, message = GRPC_STATUS[exc.code], exc.message
        except Exception:
            log.exception("unhandled error in %s", method.__name__)
            code, message = grpc.StatusCode.INTERNAL, f"internal error in {method.__name__}"
        await context.abort(code, message)
        raise AssertionError("unreachable: context.abort raises")

    return wrapper
