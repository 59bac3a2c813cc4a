"""The application: it owns the one gRPC channel; each request goes route -> handler.

No web framework and no ASGI: ``http11.HttpServer`` hands ``handle`` a whole request and
writes back what it returns (docs/decisions/015-gateway-http-layer.md). Routing is our own
table (built from the protos). Every failure becomes ``{"error": ...}`` with a status from
gateway/errors.py; an unexpected exception is logged and answered with a generic 500 that
leaks nothing.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from importlib import metadata
from typing import TYPE_CHECKING

import orjson

from inference import grpc_service_pb2 as pb
from inference import http_route_pb2 as hr
from wire.heap import TRIM_THRESHOLD_BYTES, after_failed_request, after_large_success

from .access import Access
from .channel import ServiceChannel
from .compression import decompress
from .config import GatewayConfig
from .errors import GatewayError
from .handlers import Handlers
from .local_rpc import LocalChannel
from .messages import HttpRequest, HttpResponse, error_response
from .openapi import docs_page, openapi_document
from .routes import Binding, Route, Router, load_routes, load_v1_routes
from .service_link import ServiceLink
from .tracing import TRACED_RPCS, Tracing

if TYPE_CHECKING:
    from .spans import RequestSpan

__all__ = ["GatewayApp"]

log = logging.getLogger(__name__)

_HTML = (b"content-type", b"text/html; charset=utf-8")
_JSON = (b"content-type", b"application/json")
#: At start, how long the service gets to take the gateway's link call (service_link.py).
_LINK_WAIT_S = 1.0


def _version() -> str:
    try:
        return metadata.version("triton-compatible-server")
    except metadata.PackageNotFoundError:  # pragma: no cover - run from a bare checkout
        return "0.0.0"


class GatewayApp:
    """``startup`` opens the channel, ``handle`` serves the v2 API, ``shutdown`` closes."""

    def __init__(self, config: GatewayConfig, routes: list[Route] | None = None) -> None:
        self.config = config
        self.router = Router(routes if routes is not None else load_routes() + load_v1_routes())
        self.document = openapi_document(self.router.routes, _version())
        self._static = {
            b"/openapi.json": HttpResponse(200, orjson.dumps(self.document), [_JSON]),
            b"/docs": HttpResponse(200, docs_page(self.document), [_HTML]),
        }
        self.access = Access(config.restricted)
        self.tracing = Tracing(config.trace)
        self._channel: ServiceChannel | None = None
        self._local: LocalChannel | None = None
        self._handlers: Handlers | None = None
        self._stop_by: float | None = None  # monotonic deadline, set when the stop begins
        self._link: ServiceLink | None = None

    def begin_drain(self, exit_timeout: float) -> None:
        """The stop began (``server.py``): requests on open connections are still served,
        as Triton's HTTP endpoint serves them until they close; the exit timeout bounds
        the span flush at exit."""
        self._stop_by = time.monotonic() + exit_timeout

    def follow_service(
        self,
        on_stop: Callable[[float], None],
        watch: Callable[[Callable[[bool], None]], None] | None = None,
    ) -> ServiceLink | None:
        """Follow the service's stop (``service_link.py``): ``on_stop(seconds)`` runs
        when it begins; ``watch`` (``HttpServer.watch_connections``) keeps the service
        told whether HTTP connections are open. None before ``startup``."""
        if self._channel is None:
            return None
        self._link = ServiceLink(self._channel.channel, on_stop)
        if watch is not None:
            watch(self._link.set_busy)
        self._link.start(_LINK_WAIT_S)
        return self._link

    def startup(self) -> None:
        """Open the channel; it connects at the first call, so a service that is down is
        no error."""
        self._channel = ServiceChannel(
            self.config.grpc_target, self.config.grpc_tls, self.config.grpc_keepalive_ms
        )
        path = self.config.grpc_local_socket
        self._local = LocalChannel(path) if path else None
        self._handlers = Handlers(
            self._channel.channel,
            self.config.grpc_target,
            self._follow_traces,
            on_unavailable=self._channel.reconnect,
            header_forward=self.config.header_forward,
            local=self._local,
        )
        self.tracing.start()

    def close_channel(self) -> None:
        """Close the channel: calls still running fail at once (``Channel closed``)."""
        if self._link is not None:
            self._link.close()
        if self._channel is not None:
            self._channel.close()
            self._channel = None
        if self._local is not None:
            self._local.close()

    def shutdown(self) -> None:
        """Close the channel, then flush queued spans within what is left of the exit
        timeout (after SIGTERM) or the whole of it."""
        self.close_channel()
        if self.tracing.started:  # on now or earlier (a TraceSetting may have turned it off)
            left = self.config.exit_timeout_secs
            if self._stop_by is not None:
                left = self._stop_by - time.monotonic()
            _flush_traces(self.tracing, max(1.0, left))

    def handle(self, request: HttpRequest) -> HttpResponse:
        """Answer one request (the body already read); never raises."""
        method, raw_path = request.method, request.raw_path
        error: str | None = None
        try:
            static = self._static.get(raw_path)
            if static is not None:
                if method != "GET":
                    raise GatewayError(405, "Method Not Allowed")
                return static
            route, binding, params = self.router.match(method, raw_path)
            if self.tracing.active and route.rpc in TRACED_RPCS:  # the one check while off
                request.trace = self._begin_span(request, binding, params)
            response = self._respond(route, binding, params, request)
        except GatewayError as exc:
            response = error_response(exc)
            error = exc.message
        except Exception:
            log.exception("unhandled error serving %s %s", method, raw_path.decode("latin-1"))
            error = "internal error in the gateway"
            response = error_response(GatewayError(500, error))
        if error is not None or response.status >= 400:
            after_failed_request(len(request.body))  # a large body's pages back to the OS
        elif len(request.body) >= TRIM_THRESHOLD_BYTES:
            after_large_success(len(request.body))  # its heap stays warm for the next
        trace = request.trace
        if trace is not None:  # the span ends once the answer is sent (streams included)
            status = response.status
            response.on_sent = lambda: trace.finish(status, error)
        return response

    def _respond(
        self, route: Route, binding: Binding, params: dict[str, str], request: HttpRequest
    ) -> HttpResponse:
        """Check access, inflate the body, and hand the request to its handler."""
        headers = request.headers
        self.access.check(route.rpc, headers)  # before any RPC is made
        encoding = headers.get("content-encoding")
        if request.body and encoding is not None and route.codec != hr.HTTP_CODEC_GENERATE:
            request.body = decompress(request.body, encoding, self.config.max_body_bytes)
        if self._handlers is None:
            raise GatewayError(503, "the gateway is starting or stopping")
        request.metadata = self.access.metadata(headers)
        if request.trace is not None:  # the service's parent is the gateway's span
            request.metadata = request.trace.metadata(request.metadata)
        return self._handlers.handle(route, binding, params, request)

    def _begin_span(
        self, request: HttpRequest, binding: Binding, params: dict[str, str]
    ) -> RequestSpan | None:
        """The request's span if sampled; a tracing failure never fails the request."""
        try:
            return self.tracing.begin(
                request.method, request.raw_path, binding, params, request.headers
            )
        except Exception:  # pragma: no cover - the SDK does not raise on valid input
            log.exception("could not open a span for %s %s", request.method, binding.template)
            return None

    def _follow_traces(
        self, request: pb.TraceSettingRequest, response: pb.TraceSettingResponse
    ) -> None:
        """A TraceSetting call made through the gateway succeeded: its answer governs the
        gateway's spans too (a failure here is logged; the caller still gets the answer)."""
        try:
            self.tracing.follow(
                request.model_name,
                {key: list(value.value) for key, value in request.settings.items()},
                {key: list(value.value) for key, value in response.settings.items()},
            )
        except Exception:  # pragma: no cover - follow() reads the answer defensively
            log.exception("could not apply the trace settings the service returned")


def _flush_traces(tracing: Tracing, seconds: float) -> None:
    """Export the spans still queued, for at most ``seconds``, in a daemon thread: an
    unreachable collector must not hold the exit."""
    flusher = threading.Thread(target=tracing.shutdown, name="trace-flush", daemon=True)
    flusher.start()
    flusher.join(seconds)
    if flusher.is_alive():
        log.warning("trace exporter did not flush within %.1fs; exiting without it", seconds)
