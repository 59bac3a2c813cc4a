"""Building the grpc.aio server: options, TLS, restricted protocols, health, reflection."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import socket
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2

from inference import grpc_service_pb2 as pb
from trtis import grpc_service_pb2 as v1

from .. import SERVER_ID
from ..config import ServerConfig, TlsConfig
from ..core.api import CoreApi, LogSettingsApi, RequestTracing
from .access import restrict
from .drain_listener import close_listeners
from .gateway_link import GatewayLinks
from .goaway import wait_quiet
from .large_messages import request_parser, serialize_infer_response
from .local_rpc import LocalRpcServer, bind_local_socket, unlink_quietly
from .reflection import enable_reflection
from .registration import Codec, add_service
from .response_delay import DELAY_ENV, delay_responses, delay_seconds
from .servicer import InferenceServicer
from .v1_servicer import V1_SERVER_ID, V1Servicer

__all__ = ["GrpcFrontend"]

log = logging.getLogger(__name__)

SERVICE = pb.DESCRIPTOR.services_by_name["GRPCInferenceService"]
SERVICE_NAME = SERVICE.full_name
_HEALTH = health_pb2.DESCRIPTOR.services_by_name["Health"]
#: The legacy TensorRT Inference Server v1 service (not reflection's v1).
LEGACY_SERVICE = v1.DESCRIPTOR.services_by_name["GRPCService"]
LEGACY_SERVICE_NAME = LEGACY_SERVICE.full_name


# grpc-stubs predates the asyncio health servicer that grpcio-health-checking ships.
class _Health(health.aio.HealthServicer):  # type: ignore[misc,name-defined]
    """Check answers readiness (ServerReady, with --strict-readiness) for every service
    name, "" included, computed per call: Triton's health handler asks ServerIsReady and
    never looks at the name. Watch (which Triton leaves unimplemented) streams the status
    ``set_serving`` sets for "" and the inference service."""

    def __init__(self, core: CoreApi) -> None:
        super().__init__()
        self._core = core

    async def Check(self, request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        ready = await self._core.is_ready()
        status = health_pb2.HealthCheckResponse.SERVING if ready else _NOT_SERVING
        return health_pb2.HealthCheckResponse(status=status)


_NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
#: At the stop's end: at most this long for the connections to fall quiet before GOAWAY,
#: and the grace grpc's stop gives the calls that were answered meanwhile.
_GOAWAY_WAIT_S = 1.0
_GOAWAY_GRACE_S = 0.5


def _in_use(host: str, port: int) -> bool:
    """Whether binding ``host:port`` fails with "address in use" (other failures are left
    to grpc to report). ``host`` as grpc takes it: an IPv6 address may be in brackets."""
    try:
        infos = socket.getaddrinfo(
            host.strip("[]"), port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    except OSError:
        return False
    for family, kind, proto, _, sockaddr in infos:
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(sockaddr)
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE:
                    return True
    return False


def _credentials(tls: TlsConfig) -> grpc.ServerCredentials:
    """Read once at start: a file that is missing or unreadable stops the start-up."""
    root = tls.root_cert.read_bytes() if tls.mutual and tls.root_cert is not None else None
    return grpc.ssl_server_credentials(
        [(tls.server_key.read_bytes(), tls.server_cert.read_bytes())],
        root_certificates=root,
        require_client_auth=tls.mutual,
    )


class GrpcFrontend:
    """The gRPC endpoint: owns the grpc.aio server and the health status it reports."""

    def __init__(
        self,
        core: CoreApi,
        config: ServerConfig,
        *,
        logs: LogSettingsApi | None = None,
        tracing: RequestTracing | None = None,
        reuse_port: bool = False,
        quiet: bool = False,
        local_socket: socket.socket | None = None,
    ) -> None:
        """``reuse_port``: several frontend processes share the port (``--frontends``);
        ``quiet``: one of several frontends, which leaves the start-up lines to the parent;
        ``local_socket``: a listening Unix socket (``--grpc-local-socket``) on which the
        unary methods are served too (``local_rpc.py``)."""
        self._config = config
        self._reuse_port = reuse_port  # the supervisor checked the port and holds it
        self._credentials = _credentials(config.tls) if config.tls is not None else None
        self._server = grpc.aio.server(
            options=[
                ("grpc.max_receive_message_length", config.grpc_max_message_bytes),
                ("grpc.max_send_message_length", config.grpc_max_message_bytes),
                ("grpc.so_reuseport", 1 if config.grpc_reuse_port or reuse_port else 0),
                *config.grpc_arguments,  # Triton's --grpc-keepalive-* and the like
            ]
        )
        self._servicer = InferenceServicer(
            core,
            config.grpc_max_message_bytes,
            logs=logs,
            tracing=tracing,
            header_forward=config.header_forward,
        )
        # v1 reports --id when it is given, else the 1.11 server's default "inference:0".
        v1_id = config.server_id if config.server_id != SERVER_ID else V1_SERVER_ID
        self._v1 = V1Servicer(
            core, config.grpc_max_message_bytes, v1_id, header_forward=config.header_forward
        )
        self._health = _Health(core)
        self._port = 0
        if config.restricted:
            guarded = restrict(self._servicer, self._health, config.restricted, self._v1)
            if not quiet:
                log.info("restricted protocols: %s", ", ".join(sorted(set(guarded))))
        delay = delay_seconds()
        if delay:  # Triton's test hook: every non-inference answer written `delay` s late
            delay_responses(self._servicer, self._health, delay)
            if not quiet:
                log.info("%s=%d: non-inference gRPC responses are delayed", DELAY_ENV, delay)
        # Our own registration (wire.py): a request that does not parse gets INVALID_ARGUMENT.
        # Large ModelInfer messages skip protobuf's copies of their tensor bytes.
        large: dict[str, Codec] = {
            "ModelInfer": (request_parser, serialize_infer_response),
            "ModelStreamInfer": (request_parser, None),
        }
        unary = add_service(self._server, SERVICE, self._servicer, checks_own=True, codecs=large)
        unary |= add_service(self._server, LEGACY_SERVICE, self._v1, checks_own=False)
        unary |= add_service(self._server, _HEALTH, self._health, checks_own=False)
        self._local_socket = local_socket
        self._local_path = ""
        self._local = LocalRpcServer(unary, config.grpc_max_message_bytes)
        self.gateways = GatewayLinks()  # the REST gateways that follow our stop
        self._server.add_generic_rpc_handlers((self.gateways.rpc_handler(),))
        enable_reflection((SERVICE_NAME, LEGACY_SERVICE_NAME, health.SERVICE_NAME), self._server)

    async def start(self) -> int:
        """Bind and start; returns the bound port (useful with --grpc-port 0). A port in
        use raises OSError with Triton's one-line message (checked before grpc binds, so
        that grpc's own log lines do not repeat it)."""
        address = f"{self._config.grpc_address}:{self._config.grpc_port}"
        config = self._config
        if (
            config.grpc_port
            and not (config.grpc_reuse_port or self._reuse_port)
            and _in_use(config.grpc_address, config.grpc_port)
        ):
            raise OSError(f"failed to start GRPC service: Socket '{address}' already in use")
        try:
            if self._credentials is not None:
                port = self._server.add_secure_port(address, self._credentials)
            else:
                port = self._server.add_insecure_port(address)
        except RuntimeError as exc:
            why = "check the port, and the TLS certificate and key" if self._credentials else exc
            raise OSError(f"unable to bind gRPC endpoint {address}: {why}") from exc
        if self._local_socket is None and config.grpc_local_socket and not self._reuse_port:
            self._local_socket = bind_local_socket(config.grpc_local_socket)
            self._local_path = config.grpc_local_socket  # this process made it: it removes it
        await self._server.start()
        if self._local_socket is not None:
            await self._local.start(self._local_socket)
        await self.set_serving(True)
        self._port = port
        return port

    async def stop_http(self, seconds: float) -> float:
        """The stop's first step, as Triton's HTTP endpoint stops first: every gateway
        following this process stops its own and reports; returns the exit timeout left
        (``gateway_link.py``). Nothing else changes meanwhile: readiness, listener and
        admission are as before the signal, as in Triton until its core stops."""
        return await self.gateways.stop_http(seconds)

    async def set_serving(self, serving: bool) -> None:
        """What Watch reports; Check on the inference service's name asks the core. Not
        serving (shutdown): the answers still going out are tracked (see ``finish``)."""
        status = health_pb2.HealthCheckResponse.SERVING if serving else _NOT_SERVING
        if not serving:
            self._servicer.answers.stopping = True
            self._v1.answers.stopping = True
            self._v1.set_exiting()
        for name in ("", SERVICE_NAME):
            await self._health.set(name, status)

    def close_streams(self) -> None:
        self._servicer.close_streams()
        self._v1.close_streams()

    async def finish(self, seconds: float) -> bool:
        """Wait up to ``seconds`` until the inferences answered since ``set_serving(False)``
        have gone out and the open streams have ended; False when some have not. The
        server itself keeps running: the process ends without grpc's shutdown (app.py)."""
        waits = (self._servicer.answers.sent(seconds), self._v1.answers.sent(seconds))
        return all(await asyncio.gather(*waits))

    async def close_listener(self) -> bool:
        """Refuse new connections from now on; open ones are served as before. False
        where the listener cannot be closed on its own (not Linux): it then stays open
        until the process ends.

        This is what moves a load balancer off a draining replica: open-source nginx
        keys only on connection errors, never on a grpc-status, so a refused connect is
        the one answer it retries on another replica (deploy/nginx/README.md).
        """
        self._local.close()
        if self._local_path:
            unlink_quietly(self._local_path)
        return await asyncio.to_thread(close_listeners, self._port) > 0

    async def goaway(self, seconds: float) -> bool:
        """Once every answer is out (``finish``): GOAWAY on each connection, as Triton's
        gRPC endpoint stops, when the connections are quiet within ``seconds`` (grpc's
        stop would cancel a call arriving meanwhile: ``goaway.py``); False when they
        were not and nothing was sent. The process ends right after either way."""
        if not self._port or not await wait_quiet(self._port, min(seconds, _GOAWAY_WAIT_S)):
            return False
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._server.stop(_GOAWAY_GRACE_S), _GOAWAY_GRACE_S + 1.0)
        return True

    async def stop(self, grace: float) -> None:
        """grpc's stop (a start that failed half-way): refuse new RPCs, let in-flight ones
        finish for up to ``grace`` seconds. A graceful stop does not use it (exiting.py)."""
        await self.set_serving(False)
        await self._server.stop(grace)
