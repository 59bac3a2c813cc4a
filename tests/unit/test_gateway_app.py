"""The gateway's ASGI app in-process, in front of a fake gRPC servicer on 127.0.0.1:0.

Drives the app with plain ASGI messages, so it checks the app itself (lifespan, body
limit, static pages, status-only routes, infer) without an HTTP server or a real model.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import grpc
import numpy as np
import pytest

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
    await gateway.startup()
    try:
        yield gateway
    finally:
        await gateway.shutdown()
        await server.stop(None)


async def call(
    app: GatewayApp,
    method: str,
    path: str,
    body: bytes = b"",
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, str], bytes]:
    """One request through the ASGI interface, as uvicorn drives it: the body arrives in
    two chunks; afterwards receive() waits until the response is complete (disconnect)."""
    chunks = [body[: len(body) // 2], body[len(body) // 2 :]]
    sent: list[dict[str, Any]] = []
    complete = asyncio.Event()

    async def receive() -> dict[str, Any]:
        if chunks:
            chunk = chunks.pop(0)
            return {"type": "http.request", "body": chunk, "more_body": bool(chunks)}
        await complete.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)
        if message["type"] == "http.response.body" and not message.get("more_body"):
            complete.set()

    scope = {
        "type": "http",
        "method": method,
        "path": path,
        "raw_path": path.encode(),
        "headers": [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()],
    }
    await asyncio.wait_for(app(scope, receive, send), timeout=10)
    start, *bodies = sent
    headers_out = {k.decode(): v.decode() for k, v in start["headers"]}
    return start["status"], headers_out, b"".join(m["body"] for m in bodies)


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


async def test_lifespan_opens_and_closes_the_channel() -> None:
    app = GatewayApp(GatewayConfig(grpc_target="127.0.0.1:1"))
    messages = [{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}]
    sent: list[str] = []

    async def receive() -> dict[str, Any]:
        return messages.pop(0)

    async def send(message: dict[str, Any]) -> None:
        sent.append(message["type"])

    await app({"type": "lifespan"}, receive, send)
    assert sent == ["lifespan.startup.complete", "lifespan.shutdown.complete"]


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
    status, _, body = await call(app, "POST", "/v2/models/m/generate", b'{"n": 2}')
    assert status == 400 and b"exactly 1 response" in body
    status, _, body = await call(app, "POST", "/v2/models/m/generate", b'{"n": 1}')
    assert (status, json.loads(body)["i"]) == (200, 0)


async def test_a_client_that_leaves_cancels_the_stream(app: GatewayApp) -> None:
    sent: list[dict[str, Any]] = []
    chunks = [b'{"n": -1}']
    gone = asyncio.Event()

    async def receive() -> dict[str, Any]:
        if chunks:
            return {"type": "http.request", "body": chunks.pop(), "more_body": False}
        await gone.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)
        if len(sent) == 3:  # the head and two events: the client leaves
            gone.set()

    scope = {
        "type": "http",
        "method": "POST",
        "path": "/v2/models/m/generate_stream",
        "raw_path": b"/v2/models/m/generate_stream",
        "headers": [],
    }
    await asyncio.wait_for(app(scope, receive, send), timeout=5)
    sent_before = STREAM_STATE["sent"]
    await asyncio.sleep(0.1)
    assert STREAM_STATE["sent"] <= sent_before + 1  # the servicer stopped producing
