"""The gateway's app in-process behind its own HTTP layer, in front of a fake gRPC
servicer on 127.0.0.1:0: body limit, static pages, status-only routes, infer, generate,
without a real model.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import grpc
import numpy as np
import pytest
from gateway_http import call, close_servers, port_of  # noqa: F401  (autouse fixture)

from gateway.app import GatewayApp
from gateway.config import GatewayConfig, parse_args
from inference import grpc_service_pb2 as pb
from inference import grpc_service_pb2_grpc as pb_grpc


class FakeService(pb_grpc.GRPCInferenceServiceServicer):
    """Not live, and ModelInfer doubles its FP32 input; enough to exercise each codec."""

    async def ServerLive(self, request: Any, context: Any) -> pb.ServerLiveResponse:
        return pb.ServerLiveResponse(live=False)

    async def ModelInfer(self, request: pb.ModelInferRequest, context: Any) -> Any:
        data = np.frombuffer(request.raw_input_contents[0], np.float32) * 2
        response = pb.ModelInferResponse(model_name=request.model_name, model_version="3")
        response.outputs.add(name="Y", datatype="FP32", shape=request.inputs[0].shape)
        response.raw_output_contents.append(data.tobytes())
        return response

    async def ModelConfig(self, request: Any, context: Any) -> Any:
        await context.abort(grpc.StatusCode.NOT_FOUND, f"no model '{request.name}'")

    async def ModelMetadata(self, request: Any, context: Any) -> pb.ModelMetadataResponse:
        meta = pb.ModelMetadataResponse(name=request.name, versions=["3"])
        meta.inputs.add(name="n", datatype="INT32", shape=[1])
        return meta

    async def ModelStreamInfer(self, requests: Any, context: Any) -> AsyncIterator[Any]:
        """Decoupled-style: ``n`` responses for the one request, the last one final; n < 0
        keeps sending until cancelled."""
        async for request in requests:
            count = int(np.frombuffer(request.raw_input_contents[0], np.int32)[0])
            index = 0
            while index < count or count < 0:
                response = pb.ModelInferResponse(model_name=request.model_name, model_version="3")
                response.parameters["triton_final_response"].bool_param = index == count - 1
                response.outputs.add(name="i", datatype="INT32", shape=[1])
                response.raw_output_contents.append(np.array([index], np.int32).tobytes())
                yield pb.ModelStreamInferResponse(infer_response=response)
                index += 1
                if count < 0:
                    STREAM_STATE["sent"] = index
                    await asyncio.sleep(0.01)


STREAM_STATE: dict[str, int] = {}


@pytest.fixture
async def app() -> AsyncIterator[GatewayApp]:
    server = grpc.aio.server()
    pb_grpc.add_GRPCInferenceServiceServicer_to_server(FakeService(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    gateway = GatewayApp(GatewayConfig(grpc_target=f"127.0.0.1:{port}", max_body_bytes=1000))
    gateway.startup()
    try:
        yield gateway
    finally:
        gateway.shutdown()
        await server.stop(None)


async def test_status_route_and_error_mapping(app: GatewayApp) -> None:
    assert (await call(app, "GET", "/v2/health/live"))[::2] == (400, b"")
    status, _, body = await call(app, "GET", "/v2/models/m/config")
    assert (status, json.loads(body)) == (404, {"error": "no model 'm'"})
    status, _, body = await call(app, "GET", "/v2/health/ready")  # not implemented by the fake
    assert status == 501 and b"Method not implemented" in body


async def test_infer_through_the_app(app: GatewayApp) -> None:
    request = {"inputs": [{"name": "X", "shape": [2], "datatype": "FP32", "data": [1, 2.5]}]}
    status, headers, body = await call(
        app, "POST", "/v2/models/m/infer", json.dumps(request).encode()
    )
    assert status == 200, body
    assert headers["content-type"] == "application/json"
    assert int(headers["content-length"]) == len(body)
    assert json.loads(body)["outputs"][0]["data"] == [2.0, 5.0]


async def test_body_limit(app: GatewayApp) -> None:
    status, _, body = await call(app, "POST", "/v2/models/m/infer", b"x" * 1001)
    assert status == 413 and b"--http-max-body-bytes" in body
    status, _, _ = await call(app, "POST", "/v2/models/m/infer", b"", {"content-length": "5000"})
    assert status == 413


async def test_static_pages(app: GatewayApp) -> None:
    status, headers, body = await call(app, "GET", "/openapi.json")
    assert status == 200 and json.loads(body)["openapi"] == "3.0.3"
    status, headers, body = await call(app, "GET", "/docs")
    assert status == 200 and headers["content-type"].startswith("text/html")
    assert (await call(app, "PUT", "/docs"))[0] == 405


def test_startup_and_shutdown_open_and_close_the_channel() -> None:
    app = GatewayApp(GatewayConfig(grpc_target="127.0.0.1:1"))
    app.startup()
    assert app._channel is not None
    app.shutdown()
    assert app._channel is None


def test_cli_flags() -> None:
    config = parse_args(["--grpc-target", "h:9", "--http-port", "0", "--http-max-body-bytes", "7"])
    assert (config.grpc_target, config.http_port, config.max_body_bytes) == ("h:9", 0, 7)
    assert parse_args([]).http_port == 8000  # Triton's HTTP port
    with pytest.raises(SystemExit):
        parse_args(["--http-max-body-bytes", "0"])


async def test_generate_stream_sends_each_response_as_an_event(app: GatewayApp) -> None:
    status, headers, body = await call(app, "POST", "/v2/models/m/generate_stream", b'{"n": 3}')
    assert status == 200
    assert headers["content-type"].startswith("text/event-stream")
    assert "content-length" not in headers  # chunked
    events = [json.loads(e[6:]) for e in body.decode().split("\n\n") if e]
    assert [e["i"] for e in events] == [0, 1, 2]
    assert all(set(e) == {"model_name", "model_version", "i"} for e in events)
    # Triton's status comes from the first response (fine), its body says what went wrong.
    status, _, body = await call(app, "POST", "/v2/models/m/generate", b'{"n": 2}')
    assert status == 200 and b"exactly 1 response" in body
    status, _, body = await call(app, "POST", "/v2/models/m/generate", b'{"n": 1}')
    assert (status, json.loads(body)["i"]) == (200, 0)


async def test_a_client_that_leaves_cancels_the_stream(app: GatewayApp) -> None:
    port = port_of(app)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    body = b'{"n": -1}'
    writer.write(
        b"POST /v2/models/m/generate_stream HTTP/1.1\r\nHost: x\r\n"
        b"Content-Length: %d\r\n\r\n%b" % (len(body), body)
    )
    seen = b""
    while seen.count(b"data: ") < 2:  # the head and two events: the client leaves
        seen += await asyncio.wait_for(reader.read(4096), 5)
    writer.close()
    await asyncio.sleep(0.3)  # the next write finds the client gone and cancels the RPC
    sent_before = STREAM_STATE["sent"]
    await asyncio.sleep(0.2)
    assert STREAM_STATE["sent"] <= sent_before + 1  # the servicer stopped producing
