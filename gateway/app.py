"""The ASGI application: its lifespan owns the one gRPC channel; requests go route -> handler.

Raw ASGI, no web framework: routing is our own table (built from the protos), and the
framework layer was the largest per-request cost measured (docs/decisions.md). Every
failure becomes ``{"error": ...}`` with a status from gateway/errors.py; an unexpected
exception is logged and answered with a generic 500 that leaks nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Awaitable, Callable, MutableMapping
from importlib import metadata
from typing import TYPE_CHECKING, Any

import grpc
import orjson

from inference import grpc_service_pb2 as pb

from .access import Access
from .compression import decompress
from .config import GatewayConfig, GrpcTls
from .errors import GatewayError
from .handlers import Handlers, HttpRequest, HttpResponse, error_response
from .openapi import docs_page, openapi_document
from .routes import Binding, Route, Router, load_routes, load_v1_routes
from .tracing import TRACED_RPCS, Tracing

if TYPE_CHECKING:
    from .spans import RequestSpan

__all__ = ["CHANNEL_OPTIONS", "GatewayApp"]

log = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

#: Unlimited message sizes (the HTTP body limit applies first), and a short reconnect
#: backoff so the gateway finds a restarted service within about a second by itself.
CHANNEL_OPTIONS: list[tuple[str, Any]] = [
    ("grpc.max_send_message_length", -1),
    ("grpc.max_receive_message_length", -1),
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
    ("grpc.keepalive_time_ms", 30_000),
]

_HTML = (b"content-type", b"text/html; charset=utf-8")
_THREAD_INFLATE_BYTES = 256 * 1024
_JSON = (b"content-type", b"application/json")
#: Routes still forwarded while the gateway drains (liveness, per-model readiness).
_WHILE_DRAINING = frozenset({"ServerLive", "ModelReady"})


def _version() -> str:
    try:
        return metadata.version("triton-compatible-server")
    except metadata.PackageNotFoundError:  # pragma: no cover - run from a bare checkout
        return "0.0.0"


class _Disconnected(Exception):
    """The client went away before its request body arrived."""


class GatewayApp:
    """ASGI app: ``lifespan`` opens and closes the channel, ``http`` serves the v2 API."""

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
        self._channel: grpc.aio.Channel | None = None
        self._handlers: Handlers | None = None
        #: Set at SIGTERM: readiness answers 400 and new requests are refused.
        self.draining = False
        self.in_flight = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._stop_by: float | None = None  # monotonic deadline, set at SIGTERM

    def begin_drain(self) -> None:
        """Readiness false from now on; requests already running go on."""
        self.draining = True
        self._stop_by = time.monotonic() + self.config.exit_timeout_secs

    async def wait_idle(self) -> None:
        """Until no request is in flight (streams included)."""
        await self._idle.wait()

    async def startup(self) -> None:
        """Open the channel; it connects lazily, so a service that is down is no error."""
        tls = self.config.grpc_tls
        if tls is None:
            self._channel = grpc.aio.insecure_channel(
                self.config.grpc_target, options=CHANNEL_OPTIONS
            )
        else:
            self._channel = grpc.aio.secure_channel(
                self.config.grpc_target, _credentials(tls), options=CHANNEL_OPTIONS
            )
        self._channel.get_state(try_to_connect=True)
        self._handlers = Handlers(
            self._channel,
            self.config.grpc_target,
            self._follow_traces,
            header_forward=self.config.header_forward,
        )
        self.tracing.start()

    async def shutdown(self) -> None:
        """Close the channel, then flush queued spans within what is left of the exit
        timeout (after SIGTERM) or the whole of it."""
        if self._channel is not None:
            await self._channel.close(grace=None)
            self._channel = None
        if self.tracing.started:  # on now or earlier (a TraceSetting may have turned it off)
            left = self.config.exit_timeout_secs
            if self._stop_by is not None:
                left = self._stop_by - time.monotonic()
            await _flush_traces(self.tracing, max(1.0, left))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            await self._http(scope, receive, send)
        elif scope["type"] == "lifespan":
            await self._lifespan(receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                try:
                    await self.startup()
                except Exception as exc:  # pragma: no cover - grpc rejects the target
                    await send({"type": "lifespan.startup.failed", "message": str(exc)})
                    return
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.shutdown()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.in_flight += 1
        self._idle.clear()
        try:
            await self._serve(scope, receive, send)
        finally:
            self.in_flight -= 1
            if self.in_flight == 0:
                self._idle.set()

    async def _serve(self, scope: Scope, receive: Receive, send: Send) -> None:
        method: str = scope["method"]
        raw_path: bytes = scope.get("raw_path") or scope["path"].encode("utf-8")
        request: HttpRequest | None = None
        error: str | None = None
        try:
            static = self._static.get(raw_path)
            if static is not None:
                if method != "GET":
                    raise GatewayError(405, "Method Not Allowed")
                response = static
            else:
                route, binding, params = self.router.match(method, raw_path)
                headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
                request = HttpRequest(
                    method, raw_path, headers, query=scope.get("query_string", b"")
                )
                if self.tracing.active and route.rpc in TRACED_RPCS:  # the one check while off
                    request.trace = self._begin_span(request, binding, params)
                response = await self._respond(route, binding, params, request, receive)
        except GatewayError as exc:
            response = error_response(exc)
            error = exc.message
        except _Disconnected:
            if request is not None and request.trace is not None:
                request.trace.finish(499, "the client left before its request body arrived")
            return
        except Exception:
            log.exception("unhandled error serving %s %s", method, scope["path"])
            error = "internal error in the gateway"
            response = error_response(GatewayError(500, error))
        try:
            if response.stream is not None:
                await _stream(response, receive, send)
                return
            headers_out = [(b"content-length", str(len(response.body)).encode("ascii"))]
            headers_out += response.headers
            await send(
                {"type": "http.response.start", "status": response.status, "headers": headers_out}
            )
            await send({"type": "http.response.body", "body": response.body})
        finally:
            # A traced request's span ends once its answer is sent (streams included).
            if request is not None and request.trace is not None:
                request.trace.finish(response.status, error)

    async def _respond(
        self,
        route: Route,
        binding: Binding,
        params: dict[str, str],
        request: HttpRequest,
        receive: Receive,
    ) -> HttpResponse:
        """Check access and draining, read the body, and hand the request to its handler."""
        headers = request.headers
        self.access.check(route.rpc, headers)  # before the body is read or any RPC made
        if self.draining:
            if route.rpc == "ServerReady":
                return HttpResponse(400, headers=[])  # Triton's not-ready answer
            if route.rpc not in _WHILE_DRAINING:
                raise GatewayError(503, "Server is stopping: the request was not started")
        body = await self._read_body(receive, headers)
        encoding = headers.get("content-encoding")
        if body and encoding is not None:
            limit = self.config.max_body_bytes
            if len(body) > _THREAD_INFLATE_BYTES:  # zlib releases the GIL; the loop goes on
                body = await asyncio.to_thread(decompress, body, encoding, limit)
            else:
                body = decompress(body, encoding, limit)
        if self._handlers is None:
            raise GatewayError(503, "the gateway is starting or stopping")
        request.body = body
        request.metadata = self.access.metadata(headers)
        if request.trace is not None:  # the service's parent is the gateway's span
            request.metadata = request.trace.metadata(request.metadata)
        return await self._handlers.handle(route, binding, params, request)

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

    async def _read_body(self, receive: Receive, headers: dict[str, str]) -> bytes:
        limit = self.config.max_body_bytes
        declared = headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise _too_large(int(declared), limit)
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise _Disconnected
            chunk: bytes = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                raise _too_large(size, limit)
            chunks.append(chunk)
            if not message.get("more_body", False):
                return chunks[0] if len(chunks) == 1 else b"".join(chunks)


async def _stream(response: HttpResponse, receive: Receive, send: Send) -> None:
    """Send chunks as they come (chunked encoding); a client that leaves stops the stream."""
    assert response.stream is not None
    stream = response.stream

    async def pump() -> None:
        await send(
            {"type": "http.response.start", "status": response.status, "headers": response.headers}
        )
        async for chunk in stream:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def client_gone() -> None:
        # The body has been read: receive() now waits until the client disconnects.
        while (await receive())["type"] != "http.disconnect":
            pass

    tasks = [asyncio.ensure_future(pump()), asyncio.ensure_future(client_gone())]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        if tasks[0].done() and not tasks[0].cancelled() and tasks[0].exception() is not None:
            log.error("streamed response failed", exc_info=tasks[0].exception())
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await stream.aclose()


async def _flush_traces(tracing: Tracing, seconds: float) -> None:
    """Export the spans still queued, for at most ``seconds``.

    In a daemon thread rather than the loop's executor (as the service does): an
    unreachable collector must not hold the exit.
    """
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()

    def finished() -> None:
        if not done.done():
            done.set_result(None)

    def flush() -> None:
        try:
            tracing.shutdown()
        finally:
            with contextlib.suppress(RuntimeError):  # the loop is gone: nobody waits
                loop.call_soon_threadsafe(finished)

    threading.Thread(target=flush, name="trace-flush", daemon=True).start()
    try:
        await asyncio.wait_for(done, seconds)
    except TimeoutError:
        log.warning("trace exporter did not flush within %.1fs; exiting without it", seconds)


def _credentials(tls: GrpcTls) -> grpc.ChannelCredentials:
    """TLS to the service; the files are read once, at start (a missing one stops it)."""
    root = tls.root_cert.read_bytes() if tls.root_cert is not None else None
    cert = tls.client_cert.read_bytes() if tls.client_cert is not None else None
    key = tls.client_key.read_bytes() if tls.client_key is not None else None
    return grpc.ssl_channel_credentials(
        root_certificates=root, private_key=key, certificate_chain=cert
    )


def _too_large(size: int, limit: int) -> GatewayError:
    return GatewayError(
        413,
        f"request body of {size} bytes exceeds the gateway's limit of {limit} bytes "
        "(--http-max-body-bytes)",
    )
