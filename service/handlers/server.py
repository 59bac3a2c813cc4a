"""Building the grpc.aio server: options, services (inference, health, reflection), ports."""

from __future__ import annotations

import logging

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from inference import grpc_service_pb2 as pb
from inference import grpc_service_pb2_grpc as pb_grpc

from ..config import ServerConfig
from ..core.server import InferenceServer
from .servicer import InferenceServicer

__all__ = ["GrpcFrontend"]

log = logging.getLogger(__name__)

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["GRPCInferenceService"].full_name


class GrpcFrontend:
    """The gRPC endpoint: owns the grpc.aio server and the health status it reports."""

    def __init__(self, core: InferenceServer, config: ServerConfig) -> None:
        self._config = config
        self._server = grpc.aio.server(
            options=[
                ("grpc.max_receive_message_length", config.grpc_max_message_bytes),
                ("grpc.max_send_message_length", config.grpc_max_message_bytes),
                ("grpc.so_reuseport", 1 if config.grpc_reuse_port else 0),
            ]
        )
        pb_grpc.add_GRPCInferenceServiceServicer_to_server(
            InferenceServicer(core, config.grpc_max_message_bytes), self._server
        )
        # grpc-stubs predates the asyncio health servicer that grpcio-health-checking ships.
        self._health = health.aio.HealthServicer()  # type: ignore[attr-defined]
        health_pb2_grpc.add_HealthServicer_to_server(self._health, self._server)
        reflection.enable_server_reflection(
            (SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME), self._server
        )

    async def start(self) -> int:
        """Bind and start; returns the bound port (useful with --grpc-port 0)."""
        address = f"{self._config.grpc_address}:{self._config.grpc_port}"
        try:
            port = self._server.add_insecure_port(address)
        except RuntimeError as exc:
            raise OSError(f"unable to bind gRPC endpoint {address}: {exc}") from exc
        await self._server.start()
        await self.set_serving(True)
        return port

    async def set_serving(self, serving: bool) -> None:
        status = (
            health_pb2.HealthCheckResponse.SERVING
            if serving
            else health_pb2.HealthCheckResponse.NOT_SERVING
        )
        for name in ("", SERVICE_NAME):
            await self._health.set(name, status)

    async def stop(self, grace: float) -> None:
        """Refuse new RPCs, let in-flight ones finish for up to ``grace`` seconds."""
        await self.set_serving(False)
        await self._server.stop(grace)
