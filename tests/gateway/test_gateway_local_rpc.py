"""The gateway over the service's local socket (``--grpc-local-socket``), in both process
layouts: the same answers as over gRPC, the socket's life with the service's, and a
service that goes away or comes back."""

from __future__ import annotations

import os
import signal
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import running_gateway
from gateway_process import GatewayProcess, http_request
from server_process import ServerProcess, socket_dir

ADD_SUB = {
    "inputs": [
        {"name": "INPUT0", "datatype": "FP32", "shape": [1, 16], "data": list(range(16))},
        {"name": "INPUT1", "datatype": "FP32", "shape": [1, 16], "data": [1.5] * 16},
    ]
}

#: (method, path, body): answers that must not depend on the transport.
SAME = [
    ("POST", "/v2/models/add_sub/infer", ADD_SUB),
    ("POST", "/v2/models/nope/infer", ADD_SUB),
    ("POST", "/v2/models/add_sub/infer", {"inputs": [{"name": "INPUT0"}]}),
    ("GET", "/v2/models/add_sub"),
    ("GET", "/v2/models/add_sub/config"),
    ("GET", "/v2/health/ready"),
    ("GET", "/v2/models/add_sub/versions/7/ready"),
    ("POST", "/v2/repository/index", {}),
    ("GET", "/api/health/live"),
    ("GET", "/v2/systemsharedmemory/status"),
]


def socket_path() -> str:
    return os.path.join(socket_dir(), "rpc.sock")


@pytest.fixture(scope="module", params=["0", "2"], ids=["one-process", "frontends-2"])
def service(request: pytest.FixtureRequest) -> Iterator[ServerProcess]:
    path = socket_path()
    with ServerProcess(extra_args=["--frontends", request.param, "--grpc-local-socket", path]):
        pass  # started and stopped once: the socket file is removed at the stop
    assert not os.path.exists(path)
    server = ServerProcess(extra_args=["--frontends", request.param, "--grpc-local-socket", path])
    server.start()
    server.local_socket = path
    yield server
    assert server.stop() == 0, server.log


def test_same_answers_as_over_grpc(service: ServerProcess) -> None:
    assert stat.S_IMODE(os.stat(service.local_socket).st_mode) == 0o600
    local_args = ["--grpc-local-socket", service.local_socket]
    with (
        running_gateway(service.url, local_args) as local,
        running_gateway(service.url, ["--grpc-local-socket="]) as remote,
    ):
        for method, path, *body in SAME:
            a = http_request(local.url, method, path, body[0] if body else None)
            b = http_request(remote.url, method, path, body[0] if body else None)
            assert (a.status, a.body) == (b.status, b.body), path


def test_statistics_count_local_requests(service: ServerProcess) -> None:
    with running_gateway(service.url, ["--grpc-local-socket", service.local_socket]) as gw:
        before = http_request(gw.url, "GET", "/v2/models/add_sub/stats").json()
        for _ in range(25):
            assert http_request(gw.url, "POST", "/v2/models/add_sub/infer", ADD_SUB).status == 200
        after = http_request(gw.url, "GET", "/v2/models/add_sub/stats").json()
    count = [
        doc["model_stats"][0]["inference_stats"]["success"]["count"] for doc in (before, after)
    ]
    assert count[1] - count[0] == 25


@pytest.mark.parametrize("frontends", ["0", "2"])
def test_service_away_is_503_and_a_new_one_is_found(frontends: str) -> None:
    path = socket_path()
    args = ["--frontends", frontends, "--grpc-local-socket", path]
    first = ServerProcess(extra_args=args).start()
    with running_gateway(first.url, ["--grpc-local-socket", path]) as gw:
        assert http_request(gw.url, "POST", "/v2/models/add_sub/infer", ADD_SUB).status == 200
        # Away without its stop (a graceful stop ends the gateway too: decision 033).
        first.kill()
        down = http_request(gw.url, "POST", "/v2/models/add_sub/infer", ADD_SUB)
        assert down.status == 503 and "is unavailable" in down.error, down
        with ServerProcess(extra_args=args):
            # The connections the gateway kept to the first service are noticed as closed.
            for _ in range(3):
                again = http_request(gw.url, "POST", "/v2/models/add_sub/infer", ADD_SUB)
                assert again.status == 200, again


def test_a_killed_service_leaves_a_socket_the_next_one_takes() -> None:
    path = socket_path()
    args = ["--frontends", "0", "--grpc-local-socket", path]
    first = ServerProcess(extra_args=args).start()
    second = ServerProcess(extra_args=args)
    with pytest.raises(RuntimeError, match="already in use"):
        second.start()  # a live server's socket is never taken over
    first.send_signal(signal.SIGKILL)
    first.wait(10)
    assert Path(path).exists()
    with ServerProcess(extra_args=args) as third, running_gateway(third.url) as gw:
        assert isinstance(gw, GatewayProcess)
        assert http_request(gw.url, "GET", "/v2/health/ready").status == 200
