"""The edges of a graceful stop: requests sent at its last moment, and sequences in progress.

- Callers that keep sending while the server stops get UNAVAILABLE, never CANCELLED: the
  process ends without grpc's own shutdown, which cancelled the calls grpc had received but
  not handed over yet (5-12 CANCELLED per stop with 8 busy clients, before).
- A sequence started before SIGTERM finishes: its remaining requests are served during
  the lame-duck second and the drain after it, and the server waits for its END, while
  after the lame duck new sequences and other requests are refused with Triton's "Server
  is stopping, ..." (Triton keeps accepting the requests of active sequences while it
  shuts down).
"""

from __future__ import annotations

import collections
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from integration_support import add_sub_inputs, wait_for_log
from models import add_sub_model, make_config, write_model
from sequence_models import accumulator_config, accumulator_model
from server_process import ServerProcess
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

STOPPING = "Server is stopping, scheduler for model has stopped accepting new inference requests"


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("shutdown_repo")
    write_model(root, "accum", accumulator_model(), accumulator_config("accum", idle_us=30_000_000))
    io = [("INPUT0", "FP32", [-1]), ("INPUT1", "FP32", [-1])]
    out = [("OUTPUT0", "FP32", [-1]), ("OUTPUT1", "FP32", [-1])]
    write_model(root, "add_sub", add_sub_model(), make_config("add_sub", io, out, max_batch_size=8))
    return root


@pytest.fixture
def server(repository: Path) -> Iterator[ServerProcess]:
    running = ServerProcess([repository], extra_args=["--exit-timeout-secs", "30"]).start()
    try:
        yield running
    finally:
        running.kill()


def _add_sub_request() -> service_pb2.ModelInferRequest:
    request = service_pb2.ModelInferRequest(model_name="add_sub")
    for name in ("INPUT0", "INPUT1"):
        request.inputs.add(name=name, datatype="FP32", shape=[1, 4])
        request.raw_input_contents.append(bytes(16))
    return request


def test_requests_at_the_last_moment_get_unavailable_never_cancelled(
    server: ServerProcess,
) -> None:
    outcomes: collections.Counter[str] = collections.Counter()
    lock = threading.Lock()
    gone = threading.Event()
    request = _add_sub_request()

    def busy_client() -> None:
        with grpc.insecure_channel(server.url) as channel:
            stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
            while not gone.is_set():
                try:
                    stub.ModelInfer(request, timeout=10)
                    outcome = "OK"
                except grpc.RpcError as error:
                    outcome = error.code().name
                    if "Connection refused" in (error.details() or ""):
                        return  # the process has ended
                with lock:
                    outcomes[outcome] += 1

    clients = [threading.Thread(target=busy_client) for _ in range(8)]
    for client in clients:
        client.start()
    time.sleep(1.0)
    server.send_signal(signal.SIGTERM)
    code = server.wait(30)
    gone.set()
    for client in clients:
        client.join(30)
    assert code == 0, server.log
    assert outcomes["OK"] > 0 and outcomes["UNAVAILABLE"] > 0, outcomes
    assert set(outcomes) == {"OK", "UNAVAILABLE"}, outcomes  # no CANCELLED, nothing else


def _value(value: int) -> list[grpcclient.InferInput]:
    tensor = grpcclient.InferInput("INPUT", [1, 1], "INT32")
    tensor.set_data_from_numpy(np.full((1, 1), value, dtype=np.int32))
    return [tensor]


def _sum(client: grpcclient.InferenceServerClient, value: int, **sequence: object) -> int:
    result = client.infer("accum", _value(value), sequence_id=7, **sequence)
    return int(result.as_numpy("OUTPUT")[0, 0])


def test_a_sequence_in_progress_finishes_during_shutdown(server: ServerProcess) -> None:
    with grpcclient.InferenceServerClient(server.url) as client:
        assert _sum(client, 1, sequence_start=True) == 1
        server.send_signal(signal.SIGTERM)
        wait_for_log(server, "shutting down")
        assert _sum(client, 2) == 3  # the sequence goes on
        wait_for_log(server, "lame duck over")  # new unary requests are refused from here
        assert _sum(client, 3) == 6  # and still goes on
        for refused in (
            lambda: client.infer("accum", _value(5), sequence_id=8, sequence_start=True),
            lambda: client.infer("add_sub", add_sub_inputs(*[np.ones((1, 4), np.float32)] * 2)),
        ):
            with pytest.raises(InferenceServerException) as info:
                refused()
            assert info.value.status() == "StatusCode.UNAVAILABLE"
            assert STOPPING in (info.value.message() or "")
        time.sleep(0.5)
        assert server._proc is not None and server._proc.poll() is None  # waits for END
        assert _sum(client, 4, sequence_end=True) == 10
    assert server.wait(30) == 0, server.log
    log = server.log
    assert log.index("shutting down") < log.index("server stopped")
    assert "Exit timeout expired" not in log


def _new_connection_refused(url: str) -> bool:
    """A call on a connection of its own (no subchannel shared with other channels)."""
    options = [("grpc.use_local_subchannel_pool", 1)]
    with grpc.insecure_channel(url, options=options) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        try:
            stub.ServerLive(service_pb2.ServerLiveRequest(), timeout=5)
        except grpc.RpcError as error:
            return error.code() == grpc.StatusCode.UNAVAILABLE
    return False


def test_the_lame_duck_serves_open_connections_then_refuses(repository: Path) -> None:
    """--lame-duck-secs: the listener closes at SIGTERM, while unary requests on an open
    connection are still served (a balancer's kept connection); after it they get Triton's
    refusal. Without it (the default, as Triton) they are refused at once (see above)."""
    server = ServerProcess(
        [repository], extra_args=["--exit-timeout-secs", "30", "--lame-duck-secs", "3"]
    ).start()
    try:
        inputs = add_sub_inputs(*[np.ones((1, 4), np.float32)] * 2)
        with grpcclient.InferenceServerClient(server.url) as client:
            assert _sum(client, 1, sequence_start=True) == 1  # holds the drain open
            server.send_signal(signal.SIGTERM)
            wait_for_log(server, "shutting down")
            assert client.infer("add_sub", inputs).as_numpy("OUTPUT0") is not None
            assert _new_connection_refused(server.url)
            assert client.infer("add_sub", inputs).as_numpy("OUTPUT0") is not None
            wait_for_log(server, "lame duck over (3s)")
            with pytest.raises(InferenceServerException) as info:
                client.infer("add_sub", inputs)
            assert info.value.status() == "StatusCode.UNAVAILABLE"
            assert STOPPING in (info.value.message() or "")
            assert _sum(client, 2, sequence_end=True) == 3
        assert server.wait(30) == 0, server.log
    finally:
        server.kill()
