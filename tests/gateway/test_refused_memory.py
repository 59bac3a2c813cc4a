"""A refused oversized request gives its memory back: in the default layout (an engine, two
gRPC frontends, the gateway on the local socket, as scripts/serve.sh runs them) every
process's resident set returns to within 50 MB of its baseline within a second and a half
of each error response, on every protocol (gRPC unary, gRPC stream, REST through the
gateway).

Before the first fix, six refused 300 MB ModelInfer requests left the one-process service
at 2.4 GB: grpc kept each aborted call's exception (and through its traceback, the
request), and glibc kept the heap the message was received into. Before the second, a
frontend kept 600 MB per refused request and the gateway 1.2 GB, each in a reference cycle
through an error's traceback (freed only by the next cyclic collection, some 500 small
requests later). RSS is read from /proc (Linux).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator

import grpc
import pytest
from conftest import running_gateway
from gateway_process import GatewayProcess, http_request
from proc_info import process_tree, rss_mb
from server_process import DEFAULT_REPOSITORY, ServerProcess
from tritonclient.grpc import service_pb2 as pb

OVERSIZED = 64 * 1024 * 1024  # bytes of INPUT0, where add_sub [1, 4] FP32 expects 16
REPEATS = 10
MARGIN_MB = 50
SETTLE_S = 1.5
MODEL = "add_sub"


def _rss_mb(pid: int) -> float:
    rss = rss_mb(pid)
    assert rss is not None, f"process {pid} is gone"
    return rss


def _over(baselines: dict[int, float]) -> dict[int, float]:
    """The processes above their baseline by more than the margin, with their RSS."""
    now = {pid: _rss_mb(pid) for pid in baselines}
    return {pid: rss for pid, rss in now.items() if rss > baselines[pid] + MARGIN_MB}


def _settled(baselines: dict[int, float]) -> dict[int, float]:
    """Wait up to SETTLE_S for every process to be back within the margin (the answer goes
    out before the request is freed); what is still over then."""
    deadline = time.monotonic() + SETTLE_S
    while (over := _over(baselines)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return over


def _infer_request(input0_bytes: int) -> bytes:
    request = pb.ModelInferRequest(model_name=MODEL)
    for name in ("INPUT0", "INPUT1"):
        tensor = request.inputs.add(name=name, datatype="FP32")
        tensor.shape.extend([1, 4])
    request.raw_input_contents.extend([bytes(input0_bytes), bytes(16)])
    return request.SerializeToString()


@pytest.fixture(scope="module")
def stack() -> Iterator[tuple[ServerProcess, GatewayProcess]]:
    """A service of its own in the default layout, with a gateway in front."""
    server = ServerProcess([DEFAULT_REPOSITORY], extra_args=["--frontends", "2"]).start()
    try:
        with running_gateway(server.url) as gateway:
            yield server, gateway
    finally:
        assert server.stop() == 0, server.log


def _channel(server: ServerProcess) -> grpc.Channel:
    unlimited = [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)]
    return grpc.insecure_channel(server.url, options=unlimited)


def _unary(server: ServerProcess, gateway: GatewayProcess) -> Callable[[bytes], str]:
    call = _channel(server).unary_unary("/inference.GRPCInferenceService/ModelInfer")

    def send(message: bytes) -> str:
        with pytest.raises(grpc.RpcError) as refused:
            call(message, timeout=60)
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        return refused.value.details() or ""

    return send


def _stream(server: ServerProcess, gateway: GatewayProcess) -> Callable[[bytes], str]:
    call = _channel(server).stream_stream("/inference.GRPCInferenceService/ModelStreamInfer")

    def send(message: bytes) -> str:
        replies = [pb.ModelStreamInferResponse.FromString(r) for r in call(iter([message]))]
        assert len(replies) == 1
        return replies[0].error_message

    return send


def _rest(server: ServerProcess, gateway: GatewayProcess) -> Callable[[bytes], str]:
    def send(message: bytes) -> str:
        size = len(pb.ModelInferRequest.FromString(message).raw_input_contents[0])
        header = json.dumps(
            {
                "inputs": [
                    {"name": name, "datatype": "FP32", "shape": [1, 4], "parameters": params}
                    for name, params in (
                        ("INPUT0", {"binary_data_size": size}),
                        ("INPUT1", {"binary_data_size": 16}),
                    )
                ]
            }
        ).encode()
        reply = http_request(
            gateway.url,
            "POST",
            f"/v2/models/{MODEL}/infer",
            header + bytes(size + 16),
            {"Inference-Header-Content-Length": str(len(header))},
            timeout=60,
        )
        assert reply.status == 400, reply
        return reply.error

    return send


@pytest.mark.parametrize("protocol", [_unary, _stream, _rest], ids=["grpc", "stream", "rest"])
def test_refused_oversized_requests_give_their_memory_back(
    stack: tuple[ServerProcess, GatewayProcess],
    protocol: Callable[[ServerProcess, GatewayProcess], Callable[[bytes], str]],
) -> None:
    server, gateway = stack
    send = protocol(server, gateway)
    assert "Expected 16, got 32" in send(_infer_request(32))  # warm the path up
    pids = [*process_tree(server.pid), gateway.pid]
    assert len(pids) >= 5, pids  # supervisor, engine, two frontends, gateway
    baselines = {pid: _rss_mb(pid) for pid in pids}
    oversized = _infer_request(OVERSIZED)
    for attempt in range(REPEATS):
        assert f"Expected 16, got {OVERSIZED}" in send(oversized)
        over = _settled(baselines)
        assert not over, f"after refusal {attempt + 1}: {over=} {baselines=}"
