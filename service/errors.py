"""Transport-neutral errors raised anywhere below the protocol handlers.

Each frontend owns exactly one table from ``ErrorCode`` to its own status
(``service/handlers/status.py`` for gRPC), so the core never imports grpc.

Exception tree::

    ServerError
    ├── InvalidArgument     bad tensors, shapes, datatypes, parameters
    ├── NotFound            unknown model or version
    ├── Unavailable         model not ready, server shutting down
    │   └── Rejected        a queue policy's timeout expired (Triton's reason REJECTED)
    ├── ResourceExhausted   message too large
    ├── Unimplemented       RPC or feature a later release provides
    ├── Cancelled           the caller went away
    └── Internal            backend failure (carries the backend's message)
"""

from __future__ import annotations

import enum

__all__ = [
    "Cancelled",
    "ErrorCode",
    "Internal",
    "InvalidArgument",
    "NotFound",
    "Rejected",
    "ResourceExhausted",
    "ServerError",
    "Unavailable",
    "Unimplemented",
]


class ErrorCode(enum.Enum):
    """The error classes a client can tell apart, whatever the transport."""

    INVALID_ARGUMENT = "invalid_argument"
    NOT_FOUND = "not_found"
    UNAVAILABLE = "unavailable"
    RESOURCE_EXHAUSTED = "resource_exhausted"
    UNIMPLEMENTED = "unimplemented"
    CANCELLED = "cancelled"
    INTERNAL = "internal"


class ServerError(Exception):
    """Base of every error that becomes a status with a message for the client."""

    code: ErrorCode = ErrorCode.INTERNAL
    request_id_prefix = True  # False where Triton's text never carries one

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def with_request_id(self, request_id: str) -> ServerError:
        """Prefix the message as Triton does, so clients matching on text keep working."""
        if not request_id or not self.request_id_prefix or self.message.startswith("[request id: "):
            return self
        return type(self)(f"[request id: {request_id}] {self.message}")


class InvalidArgument(ServerError):
    code = ErrorCode.INVALID_ARGUMENT


class NotFound(ServerError):
    code = ErrorCode.NOT_FOUND


class Unavailable(ServerError):
    code = ErrorCode.UNAVAILABLE


class Rejected(Unavailable):
    """A queued request whose timeout expired under a REJECT policy: failure reason REJECTED.

    Triton answers it from the scheduler with a bare "Request timeout expired"."""

    request_id_prefix = False


class ResourceExhausted(ServerError):
    code = ErrorCode.RESOURCE_EXHAUSTED


class Unimplemented(ServerError):
    code = ErrorCode.UNIMPLEMENTED


class Cancelled(ServerError):
    code = ErrorCode.CANCELLED


class Internal(ServerError):
    code = ErrorCode.INTERNAL
