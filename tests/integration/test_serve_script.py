"""scripts/serve.sh as a user runs it: the service and the gateway, the gateway's unary
calls over the service's local socket, and a busy port ending the start with exit code 1.

serve.sh needs a fixed gRPC port (the gateway is told it), so these tests pick free ones.
"""

from __future__ import annotations

import http.client
import json
import os
import queue
import re
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient
from gated_model import write_gated_model
from geventhttpclient.response import HTTPConnectionClosed
from proc_info import cmdline, process_tree
from server_process import REPO_ROOT, LoggedProcess

SERVE = ["bash", str(REPO_ROOT / "scripts" / "serve.sh")]
#: Light and quick: one frontend (a supervisor, an engine and a frontend: the default layout).
SERVICE_ARGS = ["--grpc-address", "127.0.0.1", "--metrics-address", "127.0.0.1"]
SERVICE_ARGS += ["--metrics-port", "0", "--frontends", "1"]
ADD_SUB = {
    "inputs": [
        {"name": "INPUT0", "shape": [1, 3], "datatype": "FP32", "data": [1, 2, 3]},
        {"name": "INPUT1", "shape": [1, 3], "datatype": "FP32", "data": [10, 20, 30]},
    ]
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def runtime_dir() -> Iterator[Path]:
    """A stand-in $XDG_RUNTIME_DIR; short, as a socket path has at most 107 bytes."""
    path = Path(tempfile.mkdtemp(prefix="xdg-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _connected(path: Path) -> int:
    """How many connected Unix sockets carry ``path`` (/proc/net/unix, state 03): on the
    listening side, one per connection accepted on the socket bound there."""
    count = 0
    for line in Path("/proc/net/unix").read_text().splitlines()[1:]:
        fields = line.split()
        if len(fields) >= 8 and fields[7] == str(path) and fields[5] == "03":
            count += 1
    return count


def _tunables(pid: int) -> str:
    """GLIBC_TUNABLES as process ``pid`` started with it."""
    for entry in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
        if entry.startswith(b"GLIBC_TUNABLES="):
            return entry.split(b"=", 1)[1].decode()
    return ""


def _wait_for_gateway(proc: LoggedProcess) -> None:
    """Until serve.sh's gateway says it serves (the service is up before it)."""
    deadline = time.monotonic() + 30
    while "Started HTTPService" not in proc.log:
        assert time.monotonic() < deadline, proc.log
        time.sleep(0.05)


def _infer(port: int) -> Any:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request("POST", "/v2/models/add_sub/infer", json.dumps(ADD_SUB))
        response = connection.getresponse()
        body = response.read()
    finally:
        connection.close()
    assert response.status == 200, body
    return json.loads(body)


def test_the_served_gateway_calls_over_the_local_socket(runtime_dir: Path) -> None:
    """serve.sh gives both processes one --grpc-local-socket in a private per-user
    directory; the gateway says so and its REST requests reach the service through it."""
    grpc_port, http_port = _free_port(), _free_port()
    env = {
        "XDG_RUNTIME_DIR": str(runtime_dir),
        "GATEWAY_HTTP_PORT": str(http_port),
        "GATEWAY_ARGS": "--http-address 127.0.0.1",
    }
    args = [*SERVE, *SERVICE_ARGS, "--grpc-port", str(grpc_port)]
    expected = runtime_dir / "tritonserver" / f"grpc-{grpc_port}.sock"
    with LoggedProcess(args, env=env) as proc:
        _wait_for_gateway(proc)
        assert f"(unary RPCs through its local socket {expected})" in proc.log
        assert stat.S_ISSOCK(expected.stat().st_mode)
        assert stat.S_IMODE(expected.stat().st_mode) == 0o600
        assert stat.S_IMODE(expected.parent.stat().st_mode) == 0o700
        # Every serving process runs with huge-page malloc (decision 045).
        pythons = [pid for pid in process_tree(proc.pid) if "python" in cmdline(pid)]
        assert len(pythons) >= 4, pythons  # supervisor, engine, frontend, gateway (+ workers)
        for pid in pythons:
            assert "glibc.malloc.hugetlb=1" in _tunables(pid), cmdline(pid)
        before = _connected(expected)
        outputs = {o["name"]: o["data"] for o in _infer(http_port)["outputs"]}
        assert outputs == {"OUTPUT0": [11, 22, 33], "OUTPUT1": [-9, -18, -27]}
        # The gateway keeps its connection to the socket for the next call.
        assert _connected(expected) == before + 1
        assert proc.stop() == 0, proc.log
    assert not expected.exists()  # the service removes its socket at its stop


@pytest.mark.parametrize("busy", ["http", "grpc"])
def test_a_busy_port_ends_serve_sh_with_exit_code_1(runtime_dir: Path, busy: str) -> None:
    """Either process failing to bind stops the other, and serve.sh exits with the
    failing one's 1 (not 143 from the other's stop); its one line comes first. (A service
    stopped just after it spawned its engine adds a line of its own: not asserted.)"""
    with socket.socket() as taken:
        address = "0.0.0.0" if busy == "http" else "127.0.0.1"  # the processes' binds
        taken.bind((address, 0))
        taken.listen()
        port = taken.getsockname()[1]
        grpc_port = port if busy == "grpc" else _free_port()
        http_port = port if busy == "http" else _free_port()
        env = {
            **os.environ,
            "XDG_RUNTIME_DIR": str(runtime_dir),
            "GATEWAY_HTTP_PORT": str(http_port),
        }
        done = subprocess.run(
            [*SERVE, *SERVICE_ARGS, "--grpc-port", str(grpc_port)],
            cwd=REPO_ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=90,
        )
    service = "HTTP" if busy == "http" else "GRPC"
    assert done.returncode == 1, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("E")]
    assert errors, done.stderr
    assert errors[0].endswith(
        f"failed to start {service} service: Socket '{address}:{port}' already in use"
    )
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("flags", "keepalive"),
    [
        ((), 330000),
        (("--grpc-http2-min-recv-ping-interval-without-data", "4000"), 4400),
        (("--grpc-http2-min-recv-ping-interval-without-data=600000",), 660000),
    ],
)
def test_the_gateway_pings_no_more_often_than_the_service_lets_it(
    runtime_dir: Path, flags: tuple[str, ...], keepalive: int
) -> None:
    """The service strikes each ping on a quiet call that comes sooner than its min recv
    ping interval, and cuts the connection off at the third ("Too many pings"): serve.sh
    gives the gateway a keepalive 10% above the interval given, else one above Triton's
    default (tests/unit/test_keepalive_policy.py holds the mechanism)."""
    grpc_port, http_port = _free_port(), _free_port()
    env = {
        "XDG_RUNTIME_DIR": str(runtime_dir),
        "GATEWAY_HTTP_PORT": str(http_port),
        "GATEWAY_ARGS": "--http-address 127.0.0.1",
    }
    args = [*SERVE, *SERVICE_ARGS, "--grpc-port", str(grpc_port), *flags]
    with LoggedProcess(args, env=env) as proc:
        _wait_for_gateway(proc)
        assert f", keepalive pings every {keepalive} ms" in proc.log
        assert proc.stop() == 0, proc.log


#: Triton's line when the exit timeout is spent with work left (the service logs it).
EXPIRED = "failed to stop server: Internal - Exit timeout expired. Exiting immediately."
_HTTP_COUNTDOWN = re.compile(r"Timeout (\d+): Found \d+ HTTP service connections")
_GATED = {"inputs": [{"name": "INPUT0", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}]}


def _post_gated(port: int, answers: queue.Queue[tuple[int, bytes]]) -> None:
    """One inference of the gated model on a connection of its own, closed once answered;
    status 0: the connection closed without an answer."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        connection.request("POST", "/v2/models/gated/infer", json.dumps(_GATED))
        response = connection.getresponse()
        answers.put((response.status, response.read()))
    except (http.client.RemoteDisconnected, ConnectionError):
        answers.put((0, b""))
    finally:
        connection.close()


def _serve_gated(
    runtime_dir: Path, repository: Path, frontends: str, exit_timeout: str
) -> tuple[LoggedProcess, int]:
    """serve.sh on ``repository``, once the service knows that its gateway follows it
    (a verbose line): a signal to the service alone would reach the gateway too."""
    grpc_port, http_port = _free_port(), _free_port()
    env = {
        "XDG_RUNTIME_DIR": str(runtime_dir),
        "GATEWAY_HTTP_PORT": str(http_port),
        "GATEWAY_ARGS": "--http-address 127.0.0.1",
    }
    args = [*SERVE, *SERVICE_ARGS[:-1], frontends, "--grpc-port", str(grpc_port)]
    args += ["--model-repository", str(repository), "--exit-timeout-secs", exit_timeout]
    proc = LoggedProcess([*args, "--log-verbose", "1"], env=env).start(timeout=90)
    try:
        _wait_for_gateway(proc)
        proc.wait_for_log("REST gateways following: 1", 60)
    except BaseException:
        proc.kill()
        raise
    return proc, http_port


@pytest.mark.parametrize("frontends", ["1", "0"])
def test_a_request_the_exit_timeout_abandons_ends_serve_sh_with_exit_code_1(
    runtime_dir: Path, tmp_path: Path, frontends: str
) -> None:
    """Triton exits 1 when its exit timeout is spent with requests still in flight: so do
    the gateway (it cut one off: 503) and the service (the gateway told it so), and
    serve.sh with them, in both layouts. The gateway counts the service's exit timeout
    down (serve.sh gives it the flag) to its end: one signal each, not a second that
    would cut its connections off at once."""
    gated = write_gated_model(tmp_path, "gated", "", max_batch_size=8)
    proc, http_port = _serve_gated(runtime_dir, tmp_path, frontends, "3")
    answers: queue.Queue[tuple[int, bytes]] = queue.Queue()
    try:
        threading.Thread(target=_post_gated, args=(http_port, answers), daemon=True).start()
        gated.wait_started()  # held at the gate past the exit timeout
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(90) == 1, proc.log
        status, body = answers.get(timeout=30)
    finally:
        gated.open_gate()
        proc.kill()
    # Cut off: the connection closed without an answer, as the real Triton closes it.
    assert (status, body) == (0, b"")
    assert [int(n) for n in _HTTP_COUNTDOWN.findall(proc.log)] == [3, 2, 1], proc.log
    assert "Exit timeout: 1 request(s) still in flight" in proc.log
    assert EXPIRED in proc.log


def _raw_infer_until_closed(port: int, model: str, seen: queue.Queue[tuple[str, bytes]]) -> None:
    """POST one inference on a bare socket and read until the server ends the connection:
    ("eof", bytes read) for an orderly close (FIN), ("reset", bytes read) for a reset."""
    body = json.dumps(_GATED).encode()
    head = f"POST /v2/models/{model}/infer HTTP/1.1\r\nHost: test\r\n"
    head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    received = b""
    with socket.create_connection(("127.0.0.1", port), timeout=120) as sock:
        sock.sendall(head.encode() + body)
        try:
            while chunk := sock.recv(65536):
                received += chunk
        except ConnectionResetError:
            seen.put(("reset", received))
            return
    seen.put(("eof", received))


def _client_infer(port: int, model: str, seen: queue.Queue[BaseException | None]) -> None:
    """One inference through tritonclient.http; what it raised (None: answered)."""
    client = httpclient.InferenceServerClient(
        f"127.0.0.1:{port}", connection_timeout=120, network_timeout=120
    )
    data = httpclient.InferInput("INPUT0", [1, 4], "FP32")
    data.set_data_from_numpy(np.array([[1, 2, 3, 4]], dtype=np.float32))
    try:
        client.infer(model, [data])
        seen.put(None)
    except BaseException as exc:  # what the client raises is what the test looks at
        seen.put(exc)
    finally:
        client.close()


def test_a_request_cut_off_by_the_exit_timeout_gets_no_answer(
    runtime_dir: Path, tmp_path: Path
) -> None:
    """Triton 2.51, its exit timeout spent with an HTTP request still in its model, closes
    that request's connection without a byte (an orderly close: tritonclient.http raises
    HTTPConnectionClosed), and exits 1 (decision 056). So does the gateway: no 503 for the
    cut-off requests. A request that ends within the timeout is answered as ever."""
    raw_model = write_gated_model(tmp_path, "held_raw", "", max_batch_size=8)
    client_model = write_gated_model(tmp_path, "held_client", "", max_batch_size=8)
    quick = write_gated_model(tmp_path, "gated", "", max_batch_size=8)
    proc, http_port = _serve_gated(runtime_dir, tmp_path, "1", "10")
    raw_seen: queue.Queue[tuple[str, bytes]] = queue.Queue()
    client_seen: queue.Queue[BaseException | None] = queue.Queue()
    answers: queue.Queue[tuple[int, bytes]] = queue.Queue()
    try:
        args: tuple[object, ...] = (http_port, "held_raw", raw_seen)
        threading.Thread(target=_raw_infer_until_closed, args=args, daemon=True).start()
        args = (http_port, "held_client", client_seen)
        threading.Thread(target=_client_infer, args=args, daemon=True).start()
        threading.Thread(target=_post_gated, args=(http_port, answers), daemon=True).start()
        for model in (raw_model, client_model, quick):
            model.wait_started()  # held at its gate
        proc.send_signal(signal.SIGTERM)
        proc.wait_for_log("Timeout 10: Found 3 HTTP service connections", 30)
        quick.open_gate()  # this one ends within the exit timeout
        status, body = answers.get(timeout=60)
        assert proc.wait(90) == 1, proc.log
        raw = raw_seen.get(timeout=30)
        raised = client_seen.get(timeout=30)
    finally:
        for model in (raw_model, client_model, quick):
            model.open_gate()
        proc.kill()
    assert status == 200, body
    assert json.loads(body)["outputs"][0]["data"] == [1, 2, 3, 4]
    assert raw == ("eof", b""), raw
    assert isinstance(raised, HTTPConnectionClosed), repr(raised)
    assert "Exit timeout: 2 request(s) still in flight" in proc.log
    assert EXPIRED in proc.log


def test_ctrl_c_serves_a_request_in_flight_to_its_end(runtime_dir: Path, tmp_path: Path) -> None:
    """A terminal's Ctrl-C signals the whole foreground group: serve.sh starts the two in
    sessions of their own, so only it gets the SIGINT and passes one SIGTERM to each. The
    request in flight is served to its end well into the countdown (a second signal
    would have cut it off after the first second), and all exit 0."""
    gated = write_gated_model(tmp_path, "gated", "", max_batch_size=8)
    proc, http_port = _serve_gated(runtime_dir, tmp_path, "1", "30")
    answers: queue.Queue[tuple[int, bytes]] = queue.Queue()
    try:
        children = [pid for pid, parent in process_tree(proc.pid).items() if parent == proc.pid]
        assert len(children) == 2, [cmdline(pid) for pid in children]  # service, gateway
        assert all(os.getsid(pid) == pid for pid in children)  # each leads its session
        threading.Thread(target=_post_gated, args=(http_port, answers), daemon=True).start()
        gated.wait_started()
        proc.send_signal(signal.SIGINT)
        proc.wait_for_log("Timeout 28: Found 1 HTTP service connections", 30)
        gated.open_gate()
        status, body = answers.get(timeout=30)
        assert proc.wait(60) == 0, proc.log
    finally:
        gated.open_gate()
        proc.kill()
    assert status == 200, body
    assert json.loads(body)["outputs"][0]["data"] == [1, 2, 3, 4]
    assert "still in flight" not in proc.log
