"""The gateway's one table from gRPC status to HTTP status, and its error type.

Exception tree::

    GatewayError(status, message)     an HTTP answer {"error": message} with that status
    └── raised by every module for bad input (4xx), and by rpc_error() for a failed RPC

Bad input is always a 4xx with a message that names the problem; a 500 only ever comes
from the service reporting INTERNAL (or from a gateway bug, with a generic message).
"""

from __future__ import annotations

from typing import cast

import grpc

__all__ = ["HTTP_STATUS", "GatewayError", "http_status", "rpc_error"]

#: Triton's HttpCodeFromError, applied to the gRPC codes its gRPC frontend produces for the
#: same TRITONSERVER_Error codes. Codes Triton never maps fall back to 400, as in Triton.
#: RESOURCE_EXHAUSTED is the one addition: the service uses it where Triton's core says
#: UNAVAILABLE ("Exceeds maximum queue size"), which Triton's HTTP frontend answers with 503.
HTTP_STATUS: dict[grpc.StatusCode, int] = {
    grpc.StatusCode.INVALID_ARGUMENT: 400,
    grpc.StatusCode.ALREADY_EXISTS: 400,
    grpc.StatusCode.CANCELLED: 400,
    grpc.StatusCode.UNKNOWN: 400,
    grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.UNAVAILABLE: 503,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 503,
    grpc.StatusCode.UNIMPLEMENTED: 501,
    grpc.StatusCode.INTERNAL: 500,
}

# Fragments of grpc-core's own messages when no connection to the service can be made or kept.
_TRANSPORT_FAILURES = (
    "failed to connect",
    "connections to all backends failing",
    "socket closed",
    "connection reset",
    "connection refused",
    "channel closed",
)


class GatewayError(Exception):
    """An error answer: HTTP ``status`` with body ``{"error": message}``."""

    def __init__(self, status: int, message: str, headers: tuple[tuple[str, str], ...] = ()):
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers


def http_status(code: grpc.StatusCode) -> int:
    """The HTTP status for a gRPC status code (400 for codes outside the table)."""
    return HTTP_STATUS.get(code, 400)


def rpc_error(exc: grpc.RpcError, target: str) -> GatewayError:
    """Translate a failed RPC; a transport failure says that the service is unreachable."""
    call = cast(grpc.Call, exc)  # what grpc raises for a failed call is also its Call
    code = call.code()
    details = call.details() or str(code.name)
    if code == grpc.StatusCode.UNAVAILABLE and any(
        f in details.lower() for f in _TRANSPORT_FAILURES
    ):
        return GatewayError(503, f"inference service at {target} is unavailable: {details}")
    if code == grpc.StatusCode.CANCELLED and "channel closed" in details.lower():
        return GatewayError(503, "Server is stopping: the request was cut off by the exit timeout")
    return GatewayError(http_status(code), details)
