"""``--frontends N``: gRPC frontend processes over one engine process.

Real servers, real processes: frontends are killed and replaced, the engine is killed,
streams and cancellations cross the channel, and every frontend reports the engine's
statistics.
"""

from __future__ import annotations

import os
import queue
import re
import signal
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import models
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.utils.shared_memory as shm
from integration_support import add_sub_inputs, running_server, wait_for_log
from proc_info import pid_alive
from server_process import ServerProcess
from shm_support import key_of, region
from tritonclient.utils import InferenceServerException

# A queue delay long enough that requests are surely queued in the engine when the test
# acts, short enough to keep the test fast.
DELAY_S = 2.0

SQUARE = """
backend: "square"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""


def _repository(root: Path) -> Path:
    """``slow``: add_sub whose batcher holds requests DELAY_S; ``plain``: add_sub;
    ``square``: decoupled."""
    models.write_model(
        root,
        "slow",
        models.add_sub_model(),
        models.make_config(
            "slow",
            [("INPUT0", "FP32", [-1]), ("INPUT1", "FP32", [-1])],
            [("OUTPUT0", "FP32", [-1]), ("OUTPUT1", "FP32", [-1])],
            max_batch_size=64,
            extra=f"dynamic_batching {{ max_queue_delay_microseconds: {int(DELAY_S * 1e6)} "
            "preferred_batch_size: [ 64 ] }",
        ),
    )
    models.write_model(
        root,
        "plain",
        models.add_sub_model(),
        models.make_config(
            "plain",
            [("INPUT0", "FP32", [-1]), ("INPUT1", "FP32", [-1])],
            [("OUTPUT0", "FP32", [-1]), ("OUTPUT1", "FP32", [-1])],
            max_batch_size=8,
        ),
    )
    (root / "square" / "1").mkdir(parents=True)
    (root / "square" / "config.pbtxt").write_text(SQUARE)
    return root


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _repository(tmp_path_factory.mktemp("frontends_repo"))


@pytest.fixture(scope="module")
def server(repo: Path) -> Iterator[ServerProcess]:
    with running_server([repo], extra_args=["--frontends", "2"]) as proc:
        yield proc


def _client(url: str) -> grpcclient.InferenceServerClient:
    """Its own TCP connection (no shared subchannel), so clients spread over frontends."""
    return grpcclient.InferenceServerClient(
        url, channel_args=[("grpc.use_local_subchannel_pool", 1)]
    )


def _spread_clients(
    server: ServerProcess, count: int = 8, frontends: int = 2, limit: int = 64
) -> list[grpcclient.InferenceServerClient]:
    """``count`` clients whose connections reach every frontend.

    The kernel hashes each connection to one SO_REUSEPORT listener, so eight connections
    all land on one of two frontends once in 128 runs; a test of the spread must not
    depend on that draw. Each new client sends one failing probe, and the pid of the
    frontend that logs it says where its connection went.
    """
    placed: list[tuple[grpcclient.InferenceServerClient, str]] = []
    while len(placed) < count or len({pid for _, pid in placed}) < frontends:
        assert len(placed) < limit, f"{limit} connections reached one frontend only"
        client = _client(server.url)
        tag = f"probe-{len(placed)}-{time.monotonic_ns()}"
        with pytest.raises(InferenceServerException):
            client.infer("no_such_model", [_int_input(0)], request_id=tag)
        wait_for_log(server, f"request id '{tag}'")
        line = next(ln for ln in server.log.splitlines() if f"request id '{tag}'" in ln)
        placed.append((client, line.split()[2]))
    # One client per frontend first, then the rest in order; the surplus is closed.
    firsts = {pid: client for client, pid in reversed(placed)}
    chosen = list(firsts.values())
    chosen += [client for client, _ in placed if client not in chosen][: count - len(chosen)]
    for client, _ in placed:
        if client not in chosen:
            client.close()
    return chosen


def _slow_inputs(batch: int = 1) -> list[grpcclient.InferInput]:
    return add_sub_inputs(np.ones((batch, 16), np.float32), np.ones((batch, 16), np.float32))


def _pids(server: ServerProcess, what: str) -> list[int]:
    return [int(p) for p in re.findall(rf"{what} started \(pid (\d+)\)", server.log)]


def test_start_up_lines_appear_once(server: ServerProcess) -> None:
    wait_for_log(server, "Started Metrics Service at")
    assert server.log.count("Started GRPCInferenceService at") == 1
    assert server.log.count("Started Metrics Service at") == 1
    assert len(_pids(server, "engine")) == 1
    assert len(_pids(server, r"frontend \d")) >= 2


def test_statistics_are_the_engines_whichever_frontend_answers(server: ServerProcess) -> None:
    clients = [_client(server.url) for _ in range(8)]
    try:
        before = clients[0].get_inference_statistics("plain").model_stats[0].inference_count
        for c in clients:
            c.infer("plain", _slow_inputs())
        counts = {
            c.get_inference_statistics("plain").model_stats[0].inference_count for c in clients
        }
        assert counts == {before + len(clients)}
    finally:
        for c in clients:
            c.close()


def _int_input(value: int) -> grpcclient.InferInput:
    tensor = grpcclient.InferInput("IN", [1], "INT32")
    tensor.set_data_from_numpy(np.array([value], dtype=np.int32))
    return tensor


def test_a_stream_of_many_responses_crosses_the_channel(server: ServerProcess) -> None:
    count = 2000
    results: queue.Queue[tuple[object, object]] = queue.Queue()
    values = []
    with _client(server.url) as client:
        client.start_stream(callback=lambda result, error: results.put((result, error)))
        client.async_stream_infer("square", [_int_input(count)], request_id="many")
        while len(values) < count:
            result, error = results.get(timeout=30)
            assert error is None, error
            values.append(int(result.as_numpy("OUT")[0]))  # type: ignore[attr-defined]
        client.stop_stream()
    assert values == [count] * count


def test_a_queued_request_cancelled_by_its_caller_never_executes(server: ServerProcess) -> None:
    with _client(server.url) as client:
        before = client.get_inference_statistics("slow").model_stats[0]
        with ThreadPoolExecutor(2) as pool:
            kept = [pool.submit(client.infer, "slow", _slow_inputs()) for _ in range(2)]
            with pytest.raises(InferenceServerException, match="Deadline"):
                client.infer("slow", _slow_inputs(), client_timeout=0.3)
            for future in kept:
                future.result(timeout=30)
        after = client.get_inference_statistics("slow").model_stats[0]
    assert after.inference_count - before.inference_count == 2
    assert after.execution_count - before.execution_count == 1


def test_killed_frontend_fails_only_its_requests_and_is_replaced(repo: Path) -> None:
    with running_server([repo], extra_args=["--frontends", "2"]) as server:
        frontends = _pids(server, r"frontend \d")
        clients = [_client(server.url) for _ in range(8)]
        outcomes: list[str] = []
        lock = threading.Lock()

        def call(client: grpcclient.InferenceServerClient) -> None:
            try:
                client.infer("slow", _slow_inputs(), client_timeout=30)
                outcome = "ok"
            except InferenceServerException as exc:
                outcome = f"error {exc.status()}"
            with lock:
                outcomes.append(outcome)

        threads = [threading.Thread(target=call, args=(c,)) for c in clients]
        for t in threads:
            t.start()
        time.sleep(DELAY_S / 3)  # every request is queued in the engine now
        victim = frontends[0]
        os.kill(victim, signal.SIGKILL)
        for t in threads:
            t.join(timeout=DELAY_S + 20)
        assert not any(t.is_alive() for t in threads), "a request hangs"
        wait_for_log(server, f"(pid {victim}) exited with signal SIGKILL: starting a new one")
        errors = [o for o in outcomes if o != "ok"]
        assert len(outcomes) == 8
        assert all(o == "error StatusCode.UNAVAILABLE" for o in errors), outcomes
        # The survivor's requests were answered; a replacement serves new connections.
        deadline = time.monotonic() + 30
        while len(_pids(server, r"frontend \d")) < 3:
            assert time.monotonic() < deadline, server.log
            time.sleep(0.05)
        replacement = _pids(server, r"frontend \d")[-1]
        wait_for_log(server, f"(pid {replacement}) serving", timeout=30)
        assert pid_alive(replacement)
        fresh = [_client(server.url) for _ in range(8)]
        for c in fresh:
            out = c.infer("plain", _slow_inputs())
            assert out.as_numpy("OUTPUT0").tolist() == [[2.0] * 16]
        for c in clients + fresh:
            c.close()


def test_engine_loss_stops_the_server_with_an_error(repo: Path) -> None:
    server = ServerProcess([repo], extra_args=["--frontends", "2"]).start()
    try:
        engine = _pids(server, "engine")[0]
        os.kill(engine, signal.SIGKILL)
        code = server.wait(timeout=30)
    finally:
        server.kill()
    assert code != 0
    assert f"the engine process (pid {engine}) exited unexpectedly with signal SIGKILL" in (
        server.log
    )
    for pid in _pids(server, r"frontend \d"):
        assert not pid_alive(pid), f"frontend {pid} outlived the server"


@pytest.mark.parametrize("width", [16, 100_000])
def test_tensors_small_and_large_cross_exactly(server: ServerProcess, width: int) -> None:
    """Small tensors ride in the frame, large ones in the slabs (both directions)."""
    rng = np.random.default_rng(width)
    a = rng.random((2, width), dtype=np.float32)
    b = rng.random((2, width), dtype=np.float32)
    with _client(server.url) as client:
        result = client.infer("slow", add_sub_inputs(a, b), client_timeout=30)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)


def test_log_settings_changed_through_one_frontend_apply_in_all(server: ServerProcess) -> None:
    """The engine owns the settings and broadcasts them: with warnings off (set through
    one connection), no frontend logs a request error; back on, every frontend does."""
    clients = _spread_clients(server)

    def fail_everywhere(tag: str) -> None:
        for i, c in enumerate(clients):
            with pytest.raises(InferenceServerException):
                c.infer("no_such_model", [_int_input(1)], request_id=f"{tag}-{i}")

    try:
        clients[0].update_log_settings({"log_warning": False})
        fail_everywhere("quiet")
        clients[-1].update_log_settings({"log_warning": True})
        assert clients[3].get_log_settings(as_json=True)["settings"]["log_warning"] == {
            "bool_param": True
        }
        fail_everywhere("loud")
        wait_for_log(server, f"request id 'loud-{len(clients) - 1}'")
    finally:
        for c in clients:
            c.close()
    assert "request id 'quiet-" not in server.log
    loud = [line for line in server.log.splitlines() if "request id 'loud-" in line]
    pids = {line.split()[2] for line in loud}
    assert len(loud) == len(clients) and len(pids) >= 2, loud  # logged by every frontend


def test_a_region_registered_through_one_frontend_serves_every_frontend(
    server: ServerProcess,
) -> None:
    """One registry, in the engine: a region registered on one connection is listed, read
    and written by requests on connections spread over the frontends, and unregistered
    through yet another."""
    clients = _spread_clients(server)
    slot = 16 * 4  # one FP32 [1, 16] tensor
    values = np.arange(8 * 16, dtype=np.float32)
    try:
        with region("spread", 2 * 8 * slot, values) as handle:
            clients[0].register_system_shared_memory("spread", key_of(handle), 2 * 8 * slot)
            for i, c in enumerate(clients):
                assert list(c.get_system_shared_memory_status(as_json=True)["regions"]) == [
                    "spread"
                ]
                inputs = _slow_inputs()
                inputs[0].set_shared_memory("spread", slot, offset=i * slot)
                output = grpcclient.InferRequestedOutput("OUTPUT0")
                output.set_shared_memory("spread", slot, offset=(8 + i) * slot)
                result = c.infer("plain", inputs, outputs=[output])
                assert result.get_response().raw_output_contents[0] == b""
                # Logged by the frontend that took the connection: proves the spread.
                with pytest.raises(InferenceServerException, match="Unable to find"):
                    missing = _slow_inputs()
                    missing[0].set_shared_memory("no_such_region", slot)
                    c.infer("plain", missing, request_id=f"shm-spread-{i}")
            written = shm.get_contents_as_numpy(handle, np.float32, [8 * 16], 8 * slot)
            np.testing.assert_array_equal(written, values + 1)
            clients[7].unregister_system_shared_memory("spread")
            assert clients[0].get_system_shared_memory_status(as_json=True) == {}
    finally:
        for c in clients:
            c.close()
    wait_for_log(server, "request id 'shm-spread-7'")
    logged = [line for line in server.log.splitlines() if "request id 'shm-spread-" in line]
    assert len({line.split()[2] for line in logged}) >= 2, logged
