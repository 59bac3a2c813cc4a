"""The gateway copies a request's sequence_id into the ``triton-sequence-id`` metadata of
its call, so a balancer between the gateway and the service replicas can keep every
request of a sequence on one replica (deploy/nginx/)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest
from gateway_http import call, close_servers  # noqa: F401  (autouse fixture)

from gateway.app import GatewayApp
from gateway.config import GatewayConfig
from gateway.sequence_header import SEQUENCE_HEADER, with_sequence_header
from inference import grpc_service_pb2 as pb
from inference import grpc_service_pb2_grpc as pb_grpc


def _request(**params: Any) -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name="m")
    for key, (kind, value) in params.items():
        setattr(request.parameters[key], kind, value)
    return request


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({}, None),
        ({"sequence_id": ("int64_param", 42)}, "42"),
        ({"sequence_id": ("uint64_param", 2**64 - 1)}, str(2**64 - 1)),
        ({"sequence_id": ("string_param", "user-7")}, "user-7"),
        ({"sequence_id": ("int64_param", 0)}, None),  # 0: not a sequence request
        ({"sequence_id": ("string_param", "")}, None),
        ({"sequence_id": ("bool_param", True)}, None),  # wrong type: the service says so
        ({"priority": ("int64_param", 3)}, None),
    ],
)
def test_header_from_the_sequence_id(params: dict[str, Any], expected: str | None) -> None:
    given = (("triton-grpc-protocol-key", "k"),)
    out = with_sequence_header(_request(**params), given)
    if expected is None:
        assert out is given
    else:
        assert out == (*given, (SEQUENCE_HEADER, expected))


class RecordingService(pb_grpc.GRPCInferenceServiceServicer):
    """Records the metadata of each inference call; answers an INT32 echo."""

    def __init__(self) -> None:
        self.seen: list[dict[str, str]] = []

    def _record(self, context: Any) -> None:
        self.seen.append({k: v for k, v in context.invocation_metadata()})

    async def ModelInfer(self, request: pb.ModelInferRequest, context: Any) -> Any:
        self._record(context)
        return _echo(request)

    async def ModelMetadata(self, request: Any, context: Any) -> pb.ModelMetadataResponse:
        meta = pb.ModelMetadataResponse(name=request.name, versions=["1"])
        meta.inputs.add(name="n", datatype="INT32", shape=[1])
        return meta

    async def ModelStreamInfer(self, requests: Any, context: Any) -> AsyncIterator[Any]:
        self._record(context)
        async for request in requests:
            yield pb.ModelStreamInferResponse(infer_response=_echo(request))


def _echo(request: pb.ModelInferRequest) -> pb.ModelInferResponse:
    response = pb.ModelInferResponse(model_name=request.model_name, model_version="1")
    response.outputs.add(name="n", datatype="INT32", shape=[1])
    response.raw_output_contents.append(request.raw_input_contents[0])
    return response


@pytest.fixture
async def recorded() -> AsyncIterator[tuple[GatewayApp, RecordingService]]:
    service = RecordingService()
    server = grpc.aio.server()
    pb_grpc.add_GRPCInferenceServiceServicer_to_server(service, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    gateway = GatewayApp(GatewayConfig(grpc_target=f"127.0.0.1:{port}"))
    gateway.startup()
    try:
        yield gateway, service
    finally:
        gateway.shutdown()
        await server.stop(None)


def _infer_body(sequence_id: Any | None) -> bytes:
    doc: dict[str, Any] = {
        "inputs": [{"name": "n", "shape": [1], "datatype": "INT32", "data": [5]}]
    }
    if sequence_id is not None:
        doc["parameters"] = {"sequence_id": sequence_id, "sequence_start": True}
    return json.dumps(doc).encode()


async def test_infer_and_generate_carry_the_header(
    recorded: tuple[GatewayApp, RecordingService],
) -> None:
    app, service = recorded
    for sequence_id in (None, 17, "corr-a"):
        status, _, body = await call(app, "POST", "/v2/models/m/infer", _infer_body(sequence_id))
        assert status == 200, body
    status, _, body = await call(
        app, "POST", "/v2/models/m/generate", json.dumps({"n": 3, "sequence_id": 9}).encode()
    )
    assert status == 200, body
    assert json.loads(body)["n"] == 3
    headers = [seen.get(SEQUENCE_HEADER) for seen in service.seen]
    assert headers == [None, "17", "corr-a", "9"]
