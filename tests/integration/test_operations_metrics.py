"""Prometheus metrics: Triton's names and labels, equal to ModelStatistics after a workload.

The values are read from the same statistics objects at scrape time, so after a known
workload (successes, failures, batch sizes, cache hits and misses) every metric must equal
its ModelStatistics counterpart exactly (durations: ns // 1000).
"""

from __future__ import annotations

import re
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from integration_support import add_sub_inputs, expect_error, running_server
from operations_support import http_get, metrics_port, scrape, write_add_sub
from server_process import ServerProcess

CACHE = "response_cache { enable: true }"
_CPU_SAMPLE = re.compile(r"^(nv_cpu_\w+) (\S+)$")  # no labels (scrape() skips these)
CPU_HELP = {
    "nv_cpu_utilization": "CPU utilization rate [0.0 - 1.0]",
    "nv_cpu_memory_total_bytes": "CPU total memory (RAM), in bytes",
    "nv_cpu_memory_used_bytes": "CPU used memory (RAM), in bytes",
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("ops_metrics")
    write_add_sub(repo, "plain")
    write_add_sub(repo, "cached", extra=CACHE)
    with running_server([repo], extra_args=["--cache-config", "local,size=1048576"]) as proc:
        yield proc


def _workload(client: grpcclient.InferenceServerClient) -> None:
    a = np.arange(6, dtype=np.float32).reshape(3, 2)
    ints = a.astype(np.int32)
    for _ in range(4):
        client.infer("plain", add_sub_inputs(a, a))  # batch 3
    client.infer("plain", add_sub_inputs(a[:1], a[:1]))  # batch 1
    for _ in range(2):  # refused by validation: no failures, as in Triton
        expect_error(
            lambda: client.infer("plain", add_sub_inputs(ints, ints, "INT32")), "INVALID_ARGUMENT"
        )
    for _ in range(3):  # one miss, then two hits
        client.infer("cached", add_sub_inputs(a, a))


def _us(ns: str | int) -> float:
    return float(int(ns) // 1000)


def test_metrics_agree_with_model_statistics(server: ServerProcess) -> None:
    with grpcclient.InferenceServerClient(server.url) as client:
        _workload(client)
        metrics = scrape(metrics_port(server))
        stats = client.get_inference_statistics(as_json=True)["model_stats"]
    assert {(s["name"], s["version"]) for s in stats} == {("plain", "1"), ("cached", "1")}
    for model in stats:
        key = (model["name"], model["version"])
        infer = model["inference_stats"]

        def metric(name: str, key: tuple[str, str] = key) -> float:
            return metrics[(name, *key)]

        assert metric("nv_inference_request_success") == int(infer["success"].get("count", 0))
        assert metric("nv_inference_request_failure") == int(infer["fail"].get("count", 0))
        assert metric("nv_inference_count") == int(model.get("inference_count", 0))
        assert metric("nv_inference_exec_count") == int(model.get("execution_count", 0))
        assert metric("nv_inference_request_duration_us") == _us(infer["success"].get("ns", 0))
        for part in ("queue", "compute_input", "compute_infer", "compute_output"):
            expected = _us(infer[part].get("ns", 0))
            assert metric(f"nv_inference_{part}_duration_us") == expected, part
        assert metric("nv_cache_num_hits_per_model") == int(infer["cache_hit"].get("count", 0))
        assert metric("nv_cache_num_misses_per_model") == int(infer["cache_miss"].get("count", 0))
        assert metric("nv_cache_hit_duration_per_model") == _us(infer["cache_hit"].get("ns", 0))
        assert metric("nv_inference_pending_request_count") == 0
        assert metric("nv_inference_request_cancelled") == 0
    # The workload itself, so the comparison above is not vacuous.
    assert metrics[("nv_inference_request_success", "plain", "1")] == 5
    assert metrics[("nv_inference_request_failure", "plain", "1")] == 0
    for reason in ("REJECTED", "CANCELED", "BACKEND", "OTHER"):  # every reason, from the start
        assert metrics[(f"nv_inference_request_failure:{reason}", "plain", "1")] == 0
    assert metrics[("nv_inference_count", "plain", "1")] == 13
    assert metrics[("nv_inference_exec_count", "plain", "1")] == 5
    assert metrics[("nv_inference_compute_infer_duration_us", "plain", "1")] > 0
    assert metrics[("nv_cache_num_hits_per_model", "cached", "1")] == 2
    assert metrics[("nv_cache_num_misses_per_model", "cached", "1")] == 1
    assert metrics[("nv_inference_request_success", "cached", "1")] == 3
    assert metrics[("nv_inference_exec_count", "cached", "1")] == 1


def _cpu_samples(port: int) -> tuple[str, dict[str, float]]:
    """The whole ``/metrics`` text and its ``nv_cpu_*`` samples."""
    status, _, body = http_get(f"http://127.0.0.1:{port}/metrics")
    assert status == 200, body
    text = body.decode()
    matches = (_CPU_SAMPLE.match(line) for line in text.splitlines())
    return text, {m[1]: float(m[2]) for m in matches if m}


def test_cpu_metrics_are_exported(server: ServerProcess) -> None:
    assert "Collecting CPU metrics" in server.log
    port = metrics_port(server)
    deadline = time.monotonic() + 10  # utilisation appears after one interval (2 s)
    text, cpu = _cpu_samples(port)
    while "nv_cpu_utilization" not in cpu:
        assert time.monotonic() < deadline, text
        time.sleep(0.1)
        text, cpu = _cpu_samples(port)
    assert set(cpu) == set(CPU_HELP)
    for name, help_text in CPU_HELP.items():
        assert f"# HELP {name} {help_text}\n# TYPE {name} gauge\n{name} " in text, name
    assert 0.0 <= cpu["nv_cpu_utilization"] <= 1.0
    assert 0 < cpu["nv_cpu_memory_used_bytes"] <= cpu["nv_cpu_memory_total_bytes"]


def test_allow_cpu_metrics_false_exports_none(tmp_path: Path) -> None:
    write_add_sub(tmp_path, "plain")
    args = ["--allow-cpu-metrics=false", "--metrics-interval-ms=50"]
    with running_server([tmp_path], extra_args=args) as server:
        time.sleep(0.2)  # several intervals: nothing may appear later either
        text, cpu = _cpu_samples(metrics_port(server))
    assert (cpu, "nv_cpu_" in text) == ({}, False)
    assert "nv_inference_request_success" in text
    assert "CPU metrics" not in server.log


def test_endpoint_answers_only_get_metrics(server: ServerProcess) -> None:
    base = f"http://127.0.0.1:{metrics_port(server)}"
    status, _, body = http_get(f"{base}/metrics", method="HEAD")
    assert (status, body) == (200, b"")
    assert http_get(f"{base}/metrics?name[]=x")[0] == 200
    assert http_get(f"{base}/")[0] == 404
    assert http_get(f"{base}/v2/health/ready")[0] == 404
    assert http_get(f"{base}/metrics", method="POST")[0] == 405


def test_malformed_http_request_is_refused(server: ServerProcess) -> None:
    with socket.create_connection(("127.0.0.1", metrics_port(server)), timeout=5) as sock:
        sock.sendall(b"NONSENSE\r\n\r\n")
        reply = sock.recv(1024)
    assert reply.startswith(b"HTTP/1.1 400 "), reply


def test_allow_metrics_false_serves_no_endpoint(tmp_path: Path) -> None:
    write_add_sub(tmp_path, "plain")
    with running_server([tmp_path], extra_args=["--allow-metrics=false"]) as server:
        assert "Started Metrics Service" not in server.log


def test_metrics_port_in_use_stops_the_start(tmp_path: Path) -> None:
    write_add_sub(tmp_path, "plain")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        server = ServerProcess([tmp_path], extra_args=["--metrics-port", str(port)])
        with pytest.raises(RuntimeError, match="server exited with 1"):
            server.start()
        server.kill()
    line = f"failed to start Metrics service: Socket '127.0.0.1:{port}' already in use"
    assert line in server.log, server.log
