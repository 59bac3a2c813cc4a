"""TraceSetting through tritonclient, --trace-config at start-up, and an exporter that
cannot reach its collector (requests and the exit must not wait for it). The span tree
itself is checked in-process with the SDK's in-memory exporter (tests/unit)."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from integration_support import add_sub_inputs, expect_error, running_server
from operations_support import write_add_sub
from server_process import ServerProcess

A = np.ones((1, 2), dtype=np.float32)


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("ops_tracing")
    write_add_sub(path, "plain")
    return path


@pytest.fixture(scope="module")
def client(repo: Path) -> Iterator[grpcclient.InferenceServerClient]:
    with (
        running_server([repo]) as server,
        grpcclient.InferenceServerClient(server.url) as c,
    ):
        yield c


def _settings(client: grpcclient.InferenceServerClient, model: str = "") -> dict[str, list[str]]:
    reply = client.get_trace_settings(model_name=model or None)
    return {name: list(value.value) for name, value in reply.settings.items()}


def test_trace_settings_global_and_per_model(client: grpcclient.InferenceServerClient) -> None:
    assert "trace" in client.get_server_metadata().extensions
    start = _settings(client)
    assert start["trace_level"] == ["OFF"] and start["trace_mode"] == ["opentelemetry"]
    assert start["trace_rate"] == ["1000"] and start["trace_count"] == ["-1"]
    client.update_trace_settings(settings={"trace_rate": "5"})
    client.update_trace_settings("plain", {"trace_count": "3", "trace_level": ["OFF"]})
    assert _settings(client, "plain")["trace_count"] == ["3"]
    assert _settings(client, "plain")["trace_rate"] == ["5"]  # inherited from global
    assert _settings(client)["trace_count"] == ["-1"]
    client.update_trace_settings("plain", {"trace_count": None})  # clear: inherit again
    assert _settings(client, "plain")["trace_count"] == ["-1"]
    client.update_trace_settings(settings={"trace_rate": None})  # clear: start-up value
    assert _settings(client)["trace_rate"] == ["1000"]


def test_trace_setting_errors(client: grpcclient.InferenceServerClient) -> None:
    expect_error(
        lambda: client.update_trace_settings(settings={"trace_file": "/tmp/t.json"}),
        "UNIMPLEMENTED",
        contains=["trace file location can not be updated"],
    )
    expect_error(
        lambda: client.update_trace_settings("missing", {"trace_rate": "2"}),
        "INVALID_ARGUMENT",
        "Request for unknown model : missing",
    )
    expect_error(
        lambda: client.update_trace_settings(settings={"trace_count": "-5"}),
        "INVALID_ARGUMENT",
        contains=["Expecting value >= -1, got: -5"],
    )


def test_unreachable_collector_delays_neither_requests_nor_exit(repo: Path) -> None:
    args = ["--trace-config=level=TIMESTAMPS", "--trace-config=rate=1"]
    args += ["--trace-config=opentelemetry,url=127.0.0.1:9/v1/traces", "--exit-timeout-secs=3"]
    server = ServerProcess([repo], extra_args=args).start()
    try:
        with grpcclient.InferenceServerClient(server.url) as client:
            assert _settings(client)["url"] == ["http://127.0.0.1:9/v1/traces"]
            assert _settings(client)["trace_level"] == ["TIMESTAMPS"]
            for _ in range(5):
                client.infer("plain", add_sub_inputs(A, A))
        started = time.monotonic()
        os.kill(server.pid, signal.SIGTERM)
        proc = server._proc
        assert proc is not None
        assert proc.wait(30) == 0, server.log
        assert time.monotonic() - started < 8, server.log
    finally:
        server.kill()
