"""Graceful shutdown: SIGTERM lets in-flight requests finish, then the process exits 0.

What a request sent after shutdown began sees (measured, and asserted below): on SIGTERM the
server logs "shutting down", closes its listener (a new connection is refused:
UNAVAILABLE), logs "lame duck over" (at once: no --lame-duck-secs here) and stops accepting
inferences, while the endpoint stays up for its open connections:
- a request that reaches the servicer is refused: UNAVAILABLE "Server is stopping,
  scheduler for model has stopped accepting new inference requests" (Triton's text);
- once the work in flight is answered and the models are unloaded, the process ends
  without grpc's own shutdown (which would cancel the calls it has received but not yet
  handed over: a bare CANCELLED); the caller of a request sent at that moment sees the
  connection close: UNAVAILABLE, and the next ones "Connection refused": UNAVAILABLE.
Whichever it is, nothing sent after "lame duck over" is served, and nothing is CANCELLED.

Signals are sent only after one RPC has been answered: the server logs its "Started" line
before it installs its SIGTERM/SIGINT handlers, so a signal right after that line can still
meet the default action (see test_signal_handlers_installed_when_serving).
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import models
import numpy as np
import onnx
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as aioclient
from integration_support import infer_input, wait_for_log
from onnx import TensorProto, helper, numpy_helper
from server_process import (
    DEFAULT_REPOSITORY,
    FRONTENDS,
    REPO_ROOT,
    SERVICE_PYTHON,
    ServerProcess,
)
from tritonclient.utils import InferenceServerException

WIDTH, LAYERS, ROWS = 1024, 8, 1024  # ~0.2-1 s per request on 2 CPU cores
IN_FLIGHT = 4
REFUSED = (
    "Server is stopping, scheduler for model has stopped accepting new inference requests",
    "Connection refused",  # the process has ended
    "Socket closed",  # the process ended as the request was on its way
    "Connection reset by peer",
)


def _slow_model() -> onnx.ModelProto:
    """'slow': FP32 [1, WIDTH] in and out, ~17 GFLOP per call, from a 4 KB request.

    INPUT0 is tiled to [ROWS, WIDTH], run through the ``mlp_model`` layers (same weights) and
    averaged back over the rows. The rows are identical, so OUTPUT0 == mlp_reference(INPUT0).
    A small request matters: it reaches the server at once, so "in flight" does not depend on
    how fast megabytes of input cross a loaded machine.
    """
    nodes = [helper.make_node("Tile", ["INPUT0", "repeats"], ["x0"], name="tile")]
    initializers = [numpy_helper.from_array(np.array([ROWS, 1], dtype=np.int64), "repeats")]
    x = "x0"
    for i, (w, b) in enumerate(models.mlp_weights(WIDTH, LAYERS)):
        initializers += [numpy_helper.from_array(w, f"W{i}"), numpy_helper.from_array(b, f"B{i}")]
        nodes.append(helper.make_node("MatMul", [x, f"W{i}"], [f"mm{i}"], name=f"matmul{i}"))
        nodes.append(helper.make_node("Add", [f"mm{i}", f"B{i}"], [f"add{i}"], name=f"add{i}"))
        x = f"add{i}"
        if i < LAYERS - 1:
            nodes.append(helper.make_node("Relu", [x], [f"relu{i}"], name=f"relu{i}"))
            x = f"relu{i}"
    nodes.append(
        helper.make_node("ReduceMean", [x], ["OUTPUT0"], axes=[0], keepdims=1, name="mean")
    )
    graph = helper.make_graph(
        nodes,
        "slow",
        [helper.make_tensor_value_info("INPUT0", TensorProto.FLOAT, [1, WIDTH])],
        [helper.make_tensor_value_info("OUTPUT0", TensorProto.FLOAT, [1, WIDTH])],
        initializer=initializers,
    )
    return models.make_model(graph)


@pytest.fixture(scope="module")
def slow_repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("slow_repo")
    models.write_model(
        repo,
        "slow",
        _slow_model(),
        models.make_config(
            "slow", [("INPUT0", "FP32", [1, WIDTH])], [("OUTPUT0", "FP32", [1, WIDTH])]
        ),
    )
    return repo


def _wait_exit(server: ServerProcess, timeout: float) -> int:
    """The exit code, without sending another signal.

    ServerProcess.stop() re-sends SIGTERM while the process is still alive; a second SIGTERM
    that lands after asyncio has restored the default handler would kill the process (-15)
    and hide its real exit code. ServerProcess has no public wait, hence the Popen.
    """
    proc = server._proc
    assert proc is not None
    return proc.wait(timeout)


def _assert_refused(error: InferenceServerException) -> None:
    """The ways a request sent after shutdown began is turned away (see module docstring):
    always UNAVAILABLE, never CANCELLED."""
    assert error.status() == "StatusCode.UNAVAILABLE", error
    assert any(text in (error.message() or "") for text in REFUSED), error


def _inputs(x: np.ndarray) -> list[grpcclient.InferInput]:
    return [infer_input("INPUT0", x, "FP32")]


async def test_sigterm_drains_in_flight_requests(slow_repository: Path) -> None:
    rng = np.random.default_rng(7)
    xs = [rng.standard_normal((1, WIDTH), dtype=np.float32) for _ in range(IN_FLIGHT)]
    expected = [models.mlp_reference(x, WIDTH, LAYERS) for x in xs]
    server = ServerProcess([slow_repository]).start()
    try:
        async with aioclient.InferenceServerClient(server.url) as client:
            started = time.monotonic()
            warm = await client.infer("slow", _inputs(xs[0]))
            single = time.monotonic() - started
            np.testing.assert_allclose(warm.as_numpy("OUTPUT0"), expected[0], rtol=1e-4, atol=1e-4)

            finished: dict[str, float] = {}

            async def infer(i: int) -> grpcclient.InferResult:
                result = await client.infer("slow", _inputs(xs[i]), request_id=f"r{i}")
                finished[f"r{i}"] = time.monotonic()
                return result

            tasks = [asyncio.create_task(infer(i)) for i in range(IN_FLIGHT)]
            try:
                # The one model instance works through them one at a time (~IN_FLIGHT x
                # single seconds: 0.04 s each on an idle fast machine, up to 1 s on a busy
                # one). Give them time to reach the server (4 KB each), well short of that.
                await asyncio.sleep(min(single / 2, 1.0))
                assert len(finished) < IN_FLIGHT, "all requests done before SIGTERM"
                sigterm_at = time.monotonic()
                os.kill(server.pid, signal.SIGTERM)

                # Past the lame-duck second a new request on the same, connected channel
                # is refused (the listener closed at SIGTERM).
                await asyncio.to_thread(wait_for_log, server, "lame duck over")
                with pytest.raises(InferenceServerException) as late:
                    await client.infer("slow", _inputs(xs[0]), request_id="late")
                _assert_refused(late.value)

                results = await asyncio.gather(*tasks)
            finally:
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)

        # Every in-flight request completed, with the right answer for its own input.
        for i, result in enumerate(results):
            assert result.get_response().id == f"r{i}"
            np.testing.assert_allclose(
                result.as_numpy("OUTPUT0"), expected[i], rtol=1e-4, atol=1e-4
            )
        assert max(finished.values()) > sigterm_at, "no request was in flight at SIGTERM"

        code = await asyncio.to_thread(_wait_exit, server, 60)
        assert code == 0, server.log
        log = server.log
        assert "shutting down: waiting up to 30s for in-flight requests" in log
        assert log.index("shutting down") < log.index("server stopped")
        assert "Traceback" not in log, log
    finally:
        server.kill()


def test_new_connection_after_shutdown_is_refused(slow_repository: Path) -> None:
    """A client connecting after shutdown began cannot even reach the server."""
    server = ServerProcess([slow_repository]).start()
    try:
        with grpcclient.InferenceServerClient(server.url) as client:
            assert client.is_server_ready() is True
            os.kill(server.pid, signal.SIGTERM)
            assert _wait_exit(server, 30) == 0, server.log
            with (
                grpcclient.InferenceServerClient(server.url) as late,
                pytest.raises(InferenceServerException) as info,
            ):
                late.is_server_live()
            assert info.value.status() == "StatusCode.UNAVAILABLE"
            assert "Connection refused" in (info.value.message() or "")
    finally:
        server.kill()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_idle_server_stops_cleanly(slow_repository: Path, signum: signal.Signals) -> None:
    server = ServerProcess([slow_repository]).start()
    try:
        with grpcclient.InferenceServerClient(server.url) as client:
            assert client.is_server_live() is True  # answered: signal handlers are in place
        os.kill(server.pid, signum)
        assert _wait_exit(server, 30) == 0, server.log
        assert "server stopped" in server.log
    finally:
        server.kill()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_signal_handlers_installed_when_serving(default_server: ServerProcess) -> None:
    """Once the gRPC port accepts connections, SIGTERM must mean a graceful stop (exit 0).

    Deterministic form of a race seen in practice (a SIGTERM right after the port opens ended
    the process with -15 in 4 of 10 tries, once even after the "Started" line was logged; a
    SIGINT in the same spot ended in KeyboardInterrupt, -2): serve() starts the gRPC frontend
    and logs "Started GRPCInferenceService" *before* installing its signal handlers.

    Here the server's stderr is a pipe pre-filled so that its model-load lines still fit but
    its "Started" line does not: the server blocks writing that line with its port already
    listening, i.e. inside the window, and gets SIGTERM there.
    """
    # The lines a server on the default repository logs before "Started" (same code, same
    # models: the same bytes, timestamps being fixed-width), taken from the shared server.
    before = default_server.log.split("Started GRPCInferenceService")[0]
    preamble = len(before[: before.rindex("\n") + 1].encode())
    port = _free_port()
    started_line = len(
        f"{before[before.rindex(chr(10)) + 1 :]}Started GRPCInferenceService "
        f"at 127.0.0.1:{port}\n".encode()
    )
    read_fd, write_fd = os.pipe()
    capacity = fcntl.fcntl(write_fd, fcntl.F_SETPIPE_SZ, 4096)
    try:
        # Each log line carries the process id (Triton's layout), so the filler depends on
        # this server's pid: the shell holds the server back until the filler is written,
        # and exec keeps the pid.
        proc = subprocess.Popen(
            [
                "sh",
                "-c",
                'read _ && exec "$0" "$@"',
                SERVICE_PYTHON,
                "-m",
                "service",
                "--model-repository",
                str(DEFAULT_REPOSITORY),
                "--grpc-address",
                "127.0.0.1",
                "--grpc-port",
                str(port),
                "--metrics-port",
                "0",
                "--frontends",  # the shared server's layout: the same lines before "Started"
                FRONTENDS,
            ],
            cwd=REPO_ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=write_fd,
        )
        shift = len(str(proc.pid)) - len(str(default_server.pid))
        preamble += shift * before[: before.rindex("\n") + 1].count("\n")
        filler = capacity - (preamble + started_line + shift - 1)
        assert filler > 0, (capacity, preamble, started_line)
        os.write(write_fd, b"#" * filler)
        assert proc.stdin is not None
        proc.stdin.write(b"go\n")
        proc.stdin.close()
    finally:
        os.close(write_fd)
    output = b""
    listened = False
    try:
        deadline = time.monotonic() + 30
        while not (listened := _listening(port)):
            assert proc.poll() is None, f"server exited with {proc.returncode}"
            if time.monotonic() > deadline:
                # Blocked before listening: lines the shared server did not log filled the
                # pipe early; the check below tells that apart from a server that never
                # opens its port.
                break
            time.sleep(0.005)
        time.sleep(0.2)  # past the frontend's start-up awaits: blocked in the log write now
        os.kill(proc.pid, signal.SIGTERM)
        time.sleep(0.2)  # let the signal land while the write is still blocked
        with os.fdopen(read_fd, "rb") as pipe:
            read_fd = -1
            output = pipe.read()  # frees the pipe; EOF when the server is gone
        code = proc.wait(30)
    finally:
        if read_fd != -1:
            os.close(read_fd)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = output.lstrip(b"#").decode(errors="replace")
    head = text.split("Started GRPCInferenceService")[0]
    if "Started GRPCInferenceService" in text:
        head = head[: head.rindex("\n") + 1]
    if len(head.encode()) != preamble:
        pytest.skip(
            f"the server logged other lines before 'Started' than expected "
            f"({len(head.encode())} bytes, {preamble} expected):\n{text}"
        )
    assert listened, f"server never listened on port {port}:\n{text}"
    assert code == 0, f"exit code {code} on SIGTERM while serving on port {port}:\n{text}"
    assert "server stopped" in text
