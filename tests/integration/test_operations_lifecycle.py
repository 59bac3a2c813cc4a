"""Readiness and the SIGTERM sequence, observed from outside with requests in flight.

On SIGTERM the server must: turn readiness false at once (ServerReady, both health
services, as a Watch sees), close its listener at once (new connections are refused, so a
load balancer moves to another replica), refuse new requests on open streams in-band and
new unary requests on open connections with UNAVAILABLE (Triton's "Server is stopping";
the unary ones after --lame-duck-secs, 0 here), let in-flight unary requests and streamed
requests finish, end open streams once their requests are answered (OK when the client
had finished sending, else UNAVAILABLE), and exit 0 within --exit-timeout-secs; when an
execution outlives that timeout, exit at once with 1, as Triton does.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import threading
import time
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as aioclient
from integration_support import infer_input, running_server, wait_for_log
from models import identity_model, make_config, write_model
from operations_support import (
    HEALTH_CHECK,
    HEALTH_WATCH,
    NOT_SERVING,
    SERVING,
    decode_health,
    encode_health,
    slow_inputs,
    write_add_sub,
    write_slow,
)
from server_process import REPO_ROOT, ServerProcess
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

SERVICE = "inference.GRPCInferenceService"
TARGET_S = 0.6  # how long one slow request should run


@pytest.fixture(scope="module")
def slow_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("ops_slow")
    write_slow(repo)
    return repo


def _inputs(rows: int) -> list[grpcclient.InferInput]:
    return [
        infer_input(name, array, grpcclient.np_to_triton_dtype(array.dtype))
        for name, array in slow_inputs(rows).items()
    ]


def _stream_request(rows: int, request_id: str) -> service_pb2.ModelInferRequest:
    request = service_pb2.ModelInferRequest(model_name="slow", id=request_id)
    for name, array in slow_inputs(rows).items():
        tensor = request.inputs.add(name=name, shape=list(array.shape))
        tensor.datatype = grpcclient.np_to_triton_dtype(array.dtype)
        request.raw_input_contents.append(array.tobytes())
    return request


def _calibrate(url: str) -> int:
    """Rows for a request of about TARGET_S seconds on this machine, now."""
    rows = 2000
    with grpcclient.InferenceServerClient(url) as client:
        client.infer("slow", _inputs(rows))  # warm-up
        started = time.monotonic()
        client.infer("slow", _inputs(rows))
        took = max(time.monotonic() - started, 1e-3)
    return max(1, min(int(rows * TARGET_S / took), 2_000_000))


def _wait_exit(server: ServerProcess, timeout: float) -> int:
    """The exit code, without sending another signal (ServerProcess.stop would)."""
    proc = server._proc
    assert proc is not None
    return proc.wait(timeout)


async def _health(channel: grpc.aio.Channel, service: str) -> int:
    check = channel.unary_unary(HEALTH_CHECK)
    return decode_health(await check(encode_health(service), timeout=5))


async def _new_connection_refused(url: str, within: float = 1.0) -> bool:
    """Whether a call on a new connection (not one shared with the test's other channels)
    is refused with UNAVAILABLE within ``within`` seconds."""
    deadline = time.monotonic() + within
    while True:
        options = [("grpc.use_local_subchannel_pool", 1)]
        async with grpc.aio.insecure_channel(url, options=options) as fresh:
            try:
                await _health(fresh, "")
            except grpc.aio.AioRpcError as error:
                return error.code() == grpc.StatusCode.UNAVAILABLE
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.05)


async def _next_status(watch: Any) -> int:
    return decode_health(await asyncio.wait_for(watch.read(), 5))


async def test_sigterm_sequence_with_unary_and_stream_in_flight(slow_repo: Path) -> None:
    server = ServerProcess([slow_repo]).start()
    try:
        rows = _calibrate(server.url)
        async with (
            aioclient.InferenceServerClient(server.url) as client,
            grpc.aio.insecure_channel(server.url) as channel,
        ):
            stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
            assert await _health(channel, "") == SERVING
            assert await _health(channel, SERVICE) == SERVING
            watches = {
                name: channel.unary_stream(HEALTH_WATCH)(encode_health(name))
                for name in ("", SERVICE)
            }
            for watch in watches.values():
                assert await _next_status(watch) == SERVING
            stream = stub.ModelStreamInfer()
            await stream.write(_stream_request(rows, "s1"))
            unary = [
                asyncio.create_task(client.infer("slow", _inputs(rows), request_id=f"u{i}"))
                for i in range(2)
            ]
            await asyncio.sleep(TARGET_S / 3)  # all three reached the server; one runs
            assert not all(task.done() for task in unary)
            os.kill(server.pid, signal.SIGTERM)
            await asyncio.to_thread(wait_for_log, server, "shutting down")

            # Draining: not ready anywhere (the watches hear it at once), still live; a new
            # request on the open stream is refused in-band.
            for watch in watches.values():
                assert await _next_status(watch) == NOT_SERVING
                watch.cancel()
            assert await client.is_server_ready() is False
            assert await client.is_server_live() is True
            assert await _health(channel, "") == NOT_SERVING
            assert await _health(channel, SERVICE) == NOT_SERVING
            await stream.write(_stream_request(1, "s2"))
            await stream.done_writing()  # all sent: the stream may end with OK
            # The listener is closed at once: a new connection is refused.
            assert await _new_connection_refused(server.url)
            # A new unary request on the open connection is refused too, as Triton
            # refuses it while it stops (after the lame duck, none here).
            await asyncio.to_thread(wait_for_log, server, "lame duck over")
            with pytest.raises(InferenceServerException) as late:
                await client.infer("slow", _inputs(1), request_id="late")
            assert late.value.status() == "StatusCode.UNAVAILABLE"
            assert "Server is stopping" in (late.value.message() or "")

            # In-flight work completes; the stream answers both and then ends by itself.
            results = await asyncio.gather(*unary)
            assert [r.get_response().id for r in results] == ["u0", "u1"]
            answers = {}
            while (reply := await stream.read()) != grpc.aio.EOF:
                answers[reply.infer_response.id] = reply.error_message
            assert answers["s1"] == ""
            assert "Server is stopping" in answers["s2"]
            assert await stream.code() == grpc.StatusCode.OK
        code = await asyncio.to_thread(_wait_exit, server, 30)
        assert code == 0, server.log
        log = server.log
        assert log.index("shutting down") < log.index("server stopped")
        assert "Traceback" not in log, log
    finally:
        server.kill()


async def test_idle_stream_does_not_hold_the_exit(slow_repo: Path) -> None:
    server = ServerProcess([slow_repo], extra_args=["--exit-timeout-secs", "30"]).start()
    try:
        async with grpc.aio.insecure_channel(server.url) as channel:
            stream = service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelStreamInfer()
            await stream.write(_stream_request(1, "only"))
            assert (await stream.read()).infer_response.id == "only"
            started = time.monotonic()
            os.kill(server.pid, signal.SIGTERM)
            # Ended by the server, not the client; as the client might still have sent
            # requests the server never read, with UNAVAILABLE (Triton: an error too).
            with pytest.raises(grpc.aio.AioRpcError) as ended:
                await stream.read()
            assert ended.value.code() == grpc.StatusCode.UNAVAILABLE
            assert "Server is stopping" in (ended.value.details() or "")
        assert await asyncio.to_thread(_wait_exit, server, 30) == 0, server.log
        assert time.monotonic() - started < 10, "an idle stream held the exit"
    finally:
        server.kill()


def test_exit_timeout_bounds_the_exit(slow_repo: Path) -> None:
    """An execution longer than --exit-timeout-secs does not keep the process alive."""
    server = ServerProcess([slow_repo], extra_args=["--exit-timeout-secs", "0.5"]).start()
    try:
        rows = _calibrate(server.url) * 6  # ~3.6 s of work
        with grpcclient.InferenceServerClient(server.url) as client:
            errors: list[InferenceServerException] = []

            def long_request() -> None:
                try:
                    client.infer("slow", _inputs(rows))
                except InferenceServerException as exc:
                    errors.append(exc)

            worker = threading.Thread(target=long_request)
            worker.start()
            time.sleep(0.3)  # the request reaches the server and starts executing
            started = time.monotonic()
            os.kill(server.pid, signal.SIGTERM)
            assert _wait_exit(server, 30) == 1, server.log  # Triton's code: work was abandoned
            took = time.monotonic() - started
            worker.join(30)
        assert took < TARGET_S * 6 - 0.5, f"exit took {took:.2f}s: it waited for the execution"
        assert errors, "the long request should not have completed"
        assert "failed to stop server: Internal - Exit timeout expired. Exiting immediately." in (
            server.log
        )
    finally:
        server.kill()


@pytest.fixture(scope="module")
def mixed_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("ops_mixed")
    write_add_sub(repo, "good")
    broken = repo / "broken"
    broken.mkdir()
    (broken / "config.pbtxt").write_text("max_batch_size: [ oops")
    return repo


@pytest.mark.parametrize("strict", [True, False], ids=["strict", "lenient"])
def test_strict_readiness(mixed_repo: Path, strict: bool) -> None:
    """Strict: not ready while a model failed to load; lenient: ready once the server is up.

    The gRPC health check follows ServerReady (what a Kubernetes readiness probe asks)
    for every service name, "" included, as Triton's health handler does.
    """
    flag = f"--strict-readiness={'true' if strict else 'false'}"
    with (
        running_server([mixed_repo], extra_args=[flag, "--exit-on-error=false"]) as server,
        grpcclient.InferenceServerClient(server.url) as client,
        grpc.insecure_channel(server.url) as channel,
    ):
        assert client.is_server_live() is True
        assert client.is_server_ready() is (not strict)
        assert client.is_model_ready("good") is True
        assert client.is_model_ready("broken") is False
        check = channel.unary_unary(HEALTH_CHECK)
        for service in ("", SERVICE):
            ready = decode_health(check(encode_health(service), timeout=5))
            assert ready == (NOT_SERVING if strict else SERVING)
        np.testing.assert_array_equal(
            client.infer(
                "good",
                [
                    infer_input("INPUT0", np.ones((1, 2), np.float32), "FP32"),
                    infer_input("INPUT1", np.ones((1, 2), np.float32), "FP32"),
                ],
            ).as_numpy("OUTPUT0"),
            np.full((1, 2), 2.0, np.float32),
        )


def _write_wait_then_copy(repo: Path) -> None:
    """Ensemble 'wait_then_copy': sleepy (a Python model sleeping DELAY_MS) hands its END
    time to 'copy_end' (ONNX Identity), whose output is the ensemble's OUT."""
    shutil.copytree(REPO_ROOT / "tests" / "python_models" / "sleepy", repo / "sleepy")
    fp64 = [("INPUT0", "FP64", [1])], [("OUTPUT0", "FP64", [1])]
    write_model(repo, "copy_end", identity_model("FP64", [1]), make_config("copy_end", *fp64))
    steps = (
        '{ model_name: "sleepy" model_version: -1 input_map { key: "DELAY_MS" value: "DELAY_MS" }'
        ' output_map { key: "END" value: "end" } },\n'
        '{ model_name: "copy_end" model_version: -1 input_map { key: "INPUT0" value: "end" }'
        ' output_map { key: "OUTPUT0" value: "OUT" } }'
    )
    config = make_config(
        "wait_then_copy",
        [("DELAY_MS", "INT32", [1])],
        [("OUT", "FP64", [1])],
        platform="ensemble",
        instance_kind=None,
        extra=f"ensemble_scheduling {{ step [\n{steps}\n] }}",
    )
    (repo / "wait_then_copy" / "1").mkdir(parents=True)
    (repo / "wait_then_copy" / "config.pbtxt").write_text(config)


async def test_an_ensemble_in_flight_runs_its_later_steps(tmp_path: Path) -> None:
    """SIGTERM while an ensemble's first step runs: its second step starts during the
    drain and the request completes (the steps bypass the refusal of new stream work)."""
    _write_wait_then_copy(tmp_path)
    server = ServerProcess([tmp_path]).start()
    try:
        delay = grpcclient.InferInput("DELAY_MS", [1], "INT32")
        async with aioclient.InferenceServerClient(server.url) as client:
            delay.set_data_from_numpy(np.array([1], np.int32))
            await client.infer("wait_then_copy", [delay])  # warm-up: both steps loaded
            delay.set_data_from_numpy(np.array([1500], np.int32))
            in_flight = asyncio.create_task(client.infer("wait_then_copy", [delay]))
            await asyncio.sleep(0.5)  # the first step is sleeping
            sent_at = time.time()
            os.kill(server.pid, signal.SIGTERM)
            result = await in_flight
        assert result.as_numpy("OUT")[0] > sent_at  # sleepy's END, copied by step two
        assert await asyncio.to_thread(_wait_exit, server, 30) == 0, server.log
    finally:
        server.kill()
