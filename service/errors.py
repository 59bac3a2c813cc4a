"""Transport-neutral errors raised anywhere below the protocol handlers.

Each frontend owns exactly one table from ``ErrorCode`` to its own status
(``service/grpc_frontend/status_codes.py`` for gRPC), so the core never imports grpc.

Exception tree::

    ServerError
    ├── InvalidArgument     bad tensors, shapes, datatypes, parameters
    ├── NotFound            unknown model or version
    ├── AlreadyExists       a shared-memory region name already registered
    ├── Unavailable         model not ready, server shutting down
    ├── ResourceExhausted   message too large
    ├── Unimplemented       RPC or feature a later release provides
    ├── Cancelled           the caller went away
    └── Internal            backend failure (carries the backend's message)
"""

from __future__ import annotations

import enum
from typing import Any

__all__ = [
    "AlreadyExists",
    "Cancelled",
    "ErrorCode",
    "Internal",
    "InvalidArgument",
    "NotFound",
    "ResourceExhausted",
    "ServerError",
    "Unavailable",
    "Unimplemented",
    "Unknown",
    "failure_reason",
    "request_prefix",
]


def request_prefix(request_id: str) -> str:
    """Triton's ``LogRequest()``, which starts the messages of the request checks its core
    makes (shapes, sizes, counts, queue full); other errors carry no prefix."""
    return f"[request id: {request_id or '<id_unknown>'}] "


class ErrorCode(enum.Enum):
    """The error classes a client can tell apart, whatever the transport."""

    INVALID_ARGUMENT = "invalid_argument"
    NOT_FOUND = "not_found"
    ALREADY_EXISTS = "already_exists"
    UNAVAILABLE = "unavailable"
    RESOURCE_EXHAUSTED = "resource_exhausted"
    UNIMPLEMENTED = "unimplemented"
    CANCELLED = "cancelled"
    INTERNAL = "internal"
    UNKNOWN = "unknown"  # TRITONSERVER_ERROR_UNKNOWN, e.g. from a Python model's TritonError


class ServerError(Exception):
    """Base of every error that becomes a status with a message for the client."""

    code: ErrorCode = ErrorCode.INTERNAL

    def __init__(self, message: str, *, failure: str | None = None) -> None:
        """``failure``: the statistics reason (``statistics.FAILURE_REASONS``) when the
        model had accepted the request; None for a request refused before that, which
        Triton does not count as a failure (bad input, full queue, unknown model)."""
        super().__init__(message)
        self.message = message
        self.failure = failure
        # A model's own error response (a Python model's ``InferenceResponse(error=)``):
        # Triton counts its request as a success. ``is_response`` marks one; the scheduler
        # that delivers it fills ``answered`` with (queue ns, timings, inferences).
        self.is_response = False
        self.answered: tuple[int, Any, int] | None = None

    def with_request_id(self, request_id: str) -> ServerError:
        """Prefix the message with the request's id (where Triton does so)."""
        if not request_id or self.message.startswith("[request id: "):
            return self
        error = type(self)(f"[request id: {request_id}] {self.message}", failure=self.failure)
        error.is_response, error.answered = self.is_response, self.answered
        return error


class InvalidArgument(ServerError):
    code = ErrorCode.INVALID_ARGUMENT


class NotFound(ServerError):
    code = ErrorCode.NOT_FOUND


class AlreadyExists(ServerError):
    code = ErrorCode.ALREADY_EXISTS


class Unavailable(ServerError):
    code = ErrorCode.UNAVAILABLE


class ResourceExhausted(ServerError):
    code = ErrorCode.RESOURCE_EXHAUSTED


class Unimplemented(ServerError):
    code = ErrorCode.UNIMPLEMENTED


class Cancelled(ServerError):
    code = ErrorCode.CANCELLED


class Internal(ServerError):
    code = ErrorCode.INTERNAL


class Unknown(ServerError):
    code = ErrorCode.UNKNOWN


_STATUS_WORDS = {"InvalidArgument": "Invalid argument", "NotFound": "Not found"}


def status_text(error: ServerError) -> str:
    """Triton's ``Status::AsString()``: the code's words, then the message, as a model
    version's load failure reads (``Invalid argument: ...``)."""
    name = type(error).__name__
    return f"{_STATUS_WORDS.get(name, name)}: {error.message}"


def failure_reason(exc: ServerError) -> str | None:
    """The statistics reason of a request that failed after the model accepted it (its
    own reason, or BACKEND for an INTERNAL one); None for one refused before that."""
    return exc.failure or ("BACKEND" if isinstance(exc, Internal) else None)
