"""The transport-neutral request and response every layer of the gateway passes along.

The HTTP server (``http11.py``) builds an ``HttpRequest`` from the wire and writes the
``HttpResponse`` back; the app and the handlers never see sockets, so either side can
change without the other.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson

from .errors import GatewayError

if TYPE_CHECKING:
    from .spans import RequestSpan

__all__ = ["JSON", "HttpRequest", "HttpResponse", "error_response", "json_response"]

JSON = (b"content-type", b"application/json")


@dataclass(slots=True)
class HttpRequest:
    """What the handlers need of an HTTP request (header names lower-case; a repeated
    header keeps its first value, as Triton's frontend reads it)."""

    method: str
    raw_path: bytes
    headers: dict[str, str]
    #: A large body of declared length is received straight into a bytearray.
    body: bytes | bytearray = b""
    #: gRPC metadata sent with every call made for this request (trace context, keys).
    metadata: tuple[tuple[str, str], ...] = ()
    #: The gateway's span for this request when it is traced (inference routes only).
    trace: RequestSpan | None = None
    #: The query string, undecoded (only the v1 API reads it: ``?format=``).
    query: bytes = b""


@dataclass(slots=True)
class HttpResponse:
    """A whole body, or (``stream`` set) chunks sent as they come.

    ``on_sent`` runs once, as the answer leaves: just before its last write (a stream:
    before its closing chunk), or when the connection fails or the client leaves.
    """

    status: int
    body: bytes = b""
    headers: list[tuple[bytes, bytes]] = field(default_factory=lambda: [JSON])
    #: Sent after ``body``, each from where it is (an inference answer's binary outputs:
    #: views of what the service sent), so a large answer is never joined into one copy.
    parts: list[bytes | memoryview] = field(default_factory=list)
    stream: Generator[bytes, None, None] | None = None
    on_sent: Callable[[], None] | None = None


def json_response(value: Any, status: int = 200) -> HttpResponse:
    return HttpResponse(status, orjson.dumps(value))


def error_response(error: GatewayError) -> HttpResponse:
    headers = [JSON, *((k.encode("latin-1"), v.encode("latin-1")) for k, v in error.headers)]
    return HttpResponse(error.status, orjson.dumps({"error": error.message}), headers)
