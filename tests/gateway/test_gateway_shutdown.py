"""The service's stop goes through its gateway's HTTP connections first, as Triton's does.

Triton's qa ``L0_lifecycle`` ``test_shutdown_with_live_connection`` signals the server's
one pid and then uses an HTTP connection opened before: it must still be served, and the
log must show the HTTP connections' countdown handing what it left to the core's (one
``Timeout 30: `` only). Here the signal reaches only the service; its gateway follows
(``gateway/service_link.py``, ``service/grpc_frontend/gateway_link.py``). Real service,
real gateway, tritonclient over HTTP; both layouts of the service.

With no HTTP connection open, Triton's core stops as soon as its handler has run, and its
qa ``L0_grpc_state_cleanup`` ``*_shutdownserver`` expect the requests a stream sends
after the signal to be refused: here the signalled process refuses them itself, with no
process to wait for (``service/admission.py``), which a frozen gateway proves.
"""

from __future__ import annotations

import http.client
import queue
import re
import signal
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from gated_model import write_gated_model
from gateway_process import GatewayProcess, http_request
from server_process import ServerProcess
from tritonclient.utils import InferenceServerException

_HTTP_COUNT = re.compile(r"Timeout (\d+): Found (\d+) HTTP service connections")
_STAMP = re.compile(r"^[IWE](\d{4} \d\d:\d\d:\d\d\.\d{6}) ")


def _infer(client: httpclient.InferenceServerClient) -> None:
    data = np.ones((1, 16), dtype=np.float32)
    inputs = [
        httpclient.InferInput("INPUT0", [1, 16], "FP32"),
        httpclient.InferInput("INPUT1", [1, 16], "FP32"),
    ]
    for tensor in inputs:
        tensor.set_data_from_numpy(data)
    result = client.infer("add_sub", inputs)
    assert (result.as_numpy("OUTPUT0") == 2).all()


def _stamp(log: str, text: str, last: bool = False) -> str:
    """The time of the first (or last) line holding ``text``; the two processes' lines
    share Triton's layout, so the stamps compare as strings."""
    lines = [line for line in log.splitlines() if text in line]
    assert lines, f"no line with {text!r}:\n{log}"
    match = _STAMP.match(lines[-1] if last else lines[0])
    assert match, lines
    return match.group(1)


_EXPIRED = "failed to stop server: Internal - Exit timeout expired. Exiting immediately."
_STOPPING = "Server is stopping, scheduler for model has stopped accepting new inference requests"


def _start(
    exit_timeout: str, frontends: str, repository: Path | None = None, *more: str
) -> tuple[ServerProcess, GatewayProcess]:
    timeout = ["--exit-timeout-secs", exit_timeout]
    args = ["--frontends", frontends, *timeout, *more]
    if repository is None:
        server = ServerProcess(extra_args=args).start()
    else:
        server = ServerProcess([repository], extra_args=args).start()
    try:
        gateway = GatewayProcess(server.url, timeout).start()
    except BaseException:
        server.kill()
        raise
    return server, gateway


_HOLDING = re.compile(r"holding HTTP connections: (\d+)")


def _wait_service_knows_busy(server: ServerProcess, timeout: float = 30.0) -> None:
    """Until the service has read the gateway's word that it holds a connection (its
    verbose line after the gateway's first ``busy 0``): that word travels on the link's
    own call, beside the requests, so a busy machine may deliver it after an answer."""
    deadline = time.monotonic() + timeout
    while True:
        counts = _HOLDING.findall(server.log)
        if "0" in counts and counts[-1] != "0":
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"the service never saw the connection:\n{server.log}")
        time.sleep(0.01)


@pytest.mark.parametrize("frontends", ["0", "2"])
def test_an_open_connection_is_served_after_the_service_is_signalled(frontends: str) -> None:
    server, gateway = _start("30", frontends, None, "--log-verbose", "1")
    try:
        client = httpclient.InferenceServerClient(gateway.url)  # one kept connection
        _infer(client)
        _wait_service_knows_busy(server)
        server.send_signal(signal.SIGINT)
        time.sleep(1.5)
        _infer(client)  # the same connection, served after the signal
        assert client.is_server_ready()  # as in Triton: its core has not begun to stop
        with pytest.raises(ConnectionRefusedError):
            http_request(gateway.url, "GET", "/v2/health/live", timeout=5)
        client.close()
        assert server.wait(15) == 0
        assert gateway.wait(15) == 0
    finally:
        gateway.kill()
        server.kill()
    counts = [(int(t), int(n)) for t, n in _HTTP_COUNT.findall(gateway.log)]
    assert counts[:2] == [(30, 1), (29, 1)], gateway.log
    both = gateway.log + server.log
    assert both.count("Timeout 30: ") == 1, both  # the core's countdown does not restart
    waiting = _stamp(server.log, "Waiting for in-flight requests to complete.")
    assert waiting >= _stamp(gateway.log, "HTTP service connections", last=True), both


def test_the_exit_timeout_spent_on_open_connections_closes_them() -> None:
    """An idle kept connection (a pooled client) holds the stop for the whole exit
    timeout, as in Triton, whose core then has no time left to unload its models and
    exits 1 with its line (the real Triton 2.51 here: ``Timeout 0: Found 1 live models
    and 0 in-flight non-inference requests``, then ``Exit timeout expired``). The gateway
    cut off no request: it exits 0."""
    server, gateway = _start("2", "0")
    try:
        kept = http.client.HTTPConnection(*gateway.url.rsplit(":", 1), timeout=10)
        kept.request("GET", "/v2/health/live")
        assert kept.getresponse().read() == b""
        started = time.monotonic()
        server.send_signal(signal.SIGTERM)
        assert server.wait(15) == 1
        assert gateway.wait(15) == 0
        assert time.monotonic() - started < 6
        with pytest.raises((ConnectionError, http.client.HTTPException, OSError)):
            kept.request("GET", "/v2/health/live")
            kept.getresponse().read()
    finally:
        gateway.kill()
        server.kill()
    assert [int(t) for t, _ in _HTTP_COUNT.findall(gateway.log)] == [2, 1], gateway.log
    assert "Waiting for in-flight requests to complete." in server.log
    assert "Timeout 0: Found 0 model versions that have in-flight inferences" in server.log
    assert "All models are stopped, unloading models" in server.log
    assert re.search(r"Timeout 0: Found [1-9]\d* live models and 0 in-flight", server.log)
    assert _EXPIRED in server.log


def _wait_idle_told(server: ServerProcess, times: int) -> None:
    """Until the service has heard ``times`` times that its gateway holds no HTTP
    connection (a verbose line at each change), 30 s at most."""
    deadline = time.monotonic() + 30
    while server.log.count("holding HTTP connections: 0") < times:
        assert time.monotonic() < deadline, server.log
        time.sleep(0.01)


def test_without_http_connections_the_stop_is_not_held() -> None:
    server, gateway = _start("30", "0", None, "--log-verbose", "1")
    try:
        _wait_idle_told(server, 1)  # it follows, and holds none
        assert http_request(gateway.url, "GET", "/v2/health/ready").status == 200
        # The gateway has seen that connection close (else the signal may find it open).
        _wait_idle_told(server, 2)
        started = time.monotonic()
        server.send_signal(signal.SIGTERM)
        assert server.wait(15) == 0
        assert time.monotonic() - started < 3
        assert gateway.wait(15) == 0
    finally:
        gateway.kill()
        server.kill()
    assert not _HTTP_COUNT.search(gateway.log), gateway.log
    assert "Waiting for in-flight requests to complete." in server.log


def _gated_request(request_id: str) -> dict[str, Any]:
    data = grpcclient.InferInput("INPUT0", [1, 4], "FP32")
    data.set_data_from_numpy(np.ones((1, 4), dtype=np.float32))
    return {"model_name": "gated", "inputs": [data], "request_id": request_id}


@pytest.mark.parametrize("frontends", ["0", "2"])
def test_a_streams_requests_after_the_signal_are_refused(frontends: str, tmp_path: Path) -> None:
    """The gateway follows but holds no HTTP connection, and is frozen (SIGSTOP) before
    the signal: the request the stream sends once the signalled process has logged its
    stop is refused with Triton's text, although the gateway cannot answer the stop's
    HTTP step; the request admitted before the signal is answered, and both processes
    stop cleanly once the gateway runs again."""
    gated = write_gated_model(tmp_path, "gated", "", max_batch_size=8)
    server, gateway = _start("30", frontends, tmp_path, "--log-verbose", "1")
    answers: queue.Queue[Any] = queue.Queue()
    client = grpcclient.InferenceServerClient(server.url)
    try:
        # The service knows that the gateway holds no HTTP connection.
        server.wait_for_log("REST gateways following: 1, holding HTTP connections: 0", 30)
        client.start_stream(callback=lambda result, error: answers.put(error or result))
        client.async_stream_infer(**_gated_request("admitted"))
        gated.wait_started()  # in flight, held at the gate
        gateway.send_signal(signal.SIGSTOP)
        try:
            server.send_signal(signal.SIGINT)
            server.wait_for_log("shutting down: waiting up to", 30)  # logged after the handler
            client.async_stream_infer(**_gated_request("late"))
            refused = answers.get(timeout=20)
        finally:
            gateway.send_signal(signal.SIGCONT)
        assert isinstance(refused, InferenceServerException), refused
        assert f"[request id: late] {_STOPPING}" in str(refused)
        gated.open_gate()
        served = answers.get(timeout=30)
        assert not isinstance(served, InferenceServerException), served
        assert served.get_response().id == "admitted"
        assert (served.as_numpy("OUTPUT0") == 1).all()
        client.stop_stream()
        assert server.wait(30) == 0
        assert gateway.wait(30) == 0
    finally:
        client.close()
        gateway.kill()
        server.kill()
    assert "Waiting for in-flight requests to complete." in server.log
