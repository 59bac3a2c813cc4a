"""Helpers for the operations tests (metrics, logging, lifecycle, access, TLS).

Client environment only: standard library, numpy, onnx (through ``models``), tritonclient.
Named ``operations_support`` so it cannot clash with another test folder's helper module.
"""

from __future__ import annotations

import re
import urllib.error
import urllib.request
from pathlib import Path

import models
import numpy as np
from onnx import TensorProto, helper, numpy_helper
from server_process import ServerProcess

__all__ = [
    "ADD_SUB_IO",
    "HEALTH_CHECK",
    "HEALTH_WATCH",
    "NOT_SERVING",
    "SERVING",
    "SLOW_WIDTH",
    "decode_health",
    "encode_health",
    "http_get",
    "metrics_port",
    "scrape",
    "slow_inputs",
    "write_add_sub",
    "write_slow",
]

ADD_SUB_IO = (
    [("INPUT0", "FP32", [-1]), ("INPUT1", "FP32", [-1])],
    [("OUTPUT0", "FP32", [-1]), ("OUTPUT1", "FP32", [-1])],
)
SLOW_WIDTH, SLOW_LAYERS = 256, 4
_METRICS_LINE = re.compile(r"Started Metrics Service at [^\s:]+:(\d+)")
_SAMPLE = re.compile(r'^(\w+)\{model="([^"]*)",(?:reason="([^"]*)",)?version="([^"]*)"\} (\S+)$')
# Per-GPU samples (only where NVML sees a GPU): labelled by device, not by model; CPU
# samples (Linux): no labels at all.
_HOST_SAMPLE = re.compile(
    r'^((nv_gpu_\w+|nv_energy_consumption)\{gpu_uuid="[^"]*"\}|nv_cpu_\w+) \S+$'
)


# grpc.health.v1 by hand: grpcio-health-checking needs protobuf 7, tritonclient protobuf 6.
HEALTH_CHECK = "/grpc.health.v1.Health/Check"
HEALTH_WATCH = "/grpc.health.v1.Health/Watch"
SERVING, NOT_SERVING = 1, 2


def encode_health(service: str) -> bytes:
    """HealthCheckRequest{service} (field 1, length-delimited; services are short)."""
    name = service.encode()
    assert len(name) < 128
    return (b"\x0a" + bytes([len(name)]) + name) if name else b""


def decode_health(data: bytes) -> int:
    """HealthCheckResponse.status (field 1, varint; the values are small)."""
    return data[1] if data[:1] == b"\x08" else 0


def write_add_sub(repo: Path, name: str, extra: str = "", max_batch_size: int = 8) -> None:
    config = models.make_config(name, *ADD_SUB_IO, max_batch_size=max_batch_size, extra=extra)
    models.write_model(repo, name, models.add_sub_model(), config)


def write_slow(repo: Path, name: str = "slow") -> None:
    """'slow': OUTPUT0 = mean over ROWS copies of mlp(INPUT0); the caller picks ROWS.

    INPUT0 FP32 [1, SLOW_WIDTH] and REPEATS INT64 [2] (= [rows, 1]): the work per request
    grows with ``rows`` while the request stays a few KB, so a test can make one request
    last as long as it needs without sending megabytes.
    """
    nodes = [helper.make_node("Tile", ["INPUT0", "REPEATS"], ["x0"], name="tile")]
    initializers = []
    x = "x0"
    for i, (w, b) in enumerate(models.mlp_weights(SLOW_WIDTH, SLOW_LAYERS)):
        initializers += [numpy_helper.from_array(w, f"W{i}"), numpy_helper.from_array(b, f"B{i}")]
        nodes.append(helper.make_node("MatMul", [x, f"W{i}"], [f"mm{i}"], name=f"matmul{i}"))
        nodes.append(helper.make_node("Add", [f"mm{i}", f"B{i}"], [f"add{i}"], name=f"add{i}"))
        x = f"add{i}"
    nodes.append(helper.make_node("ReduceMean", [x], ["OUTPUT0"], axes=[0], keepdims=1))
    graph = helper.make_graph(
        nodes,
        name,
        [
            helper.make_tensor_value_info("INPUT0", TensorProto.FLOAT, [1, SLOW_WIDTH]),
            helper.make_tensor_value_info("REPEATS", TensorProto.INT64, [2]),
        ],
        [helper.make_tensor_value_info("OUTPUT0", TensorProto.FLOAT, [1, SLOW_WIDTH])],
        initializer=initializers,
    )
    config = models.make_config(
        name,
        [("INPUT0", "FP32", [1, SLOW_WIDTH]), ("REPEATS", "INT64", [2])],
        [("OUTPUT0", "FP32", [1, SLOW_WIDTH])],
    )
    models.write_model(repo, name, models.make_model(graph), config)


def slow_inputs(rows: int) -> dict[str, np.ndarray]:
    return {
        "INPUT0": np.ones((1, SLOW_WIDTH), dtype=np.float32),
        "REPEATS": np.array([rows, 1], dtype=np.int64),
    }


def metrics_port(server: ServerProcess) -> int:
    """The metrics endpoint's port, from the log. Its line follows the gRPC one, which
    the server's readiness waits for, so it may come a moment after the server is up."""
    server.wait_for_log("Started Metrics Service at ")
    match = _METRICS_LINE.search(server.log)
    assert match, f"no metrics endpoint in the log:\n{server.log}"
    return int(match.group(1))


def http_get(url: str, method: str = "GET") -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            return reply.status, dict(reply.headers), reply.read()
    except urllib.error.HTTPError as error:
        with error:
            return error.code, dict(error.headers), error.read()


def scrape(port: int) -> dict[tuple[str, str, str], float]:
    """``/metrics`` as {(metric, model, version): value}; checks HELP/TYPE precede samples.

    A family with a ``reason`` label (the failure counter) appears per reason as
    ``(f"{metric}:{reason}", model, version)`` and summed under its own name."""
    status, headers, body = http_get(f"http://127.0.0.1:{port}/metrics")
    assert status == 200, body
    assert headers["Content-Type"].startswith("text/plain; version=0.0.4"), headers
    samples: dict[tuple[str, str, str], float] = {}
    typed: set[str] = set()
    for line in body.decode().splitlines():
        if line.startswith("# TYPE "):
            typed.add(line.split()[2])
        elif line and not line.startswith("#"):
            if _HOST_SAMPLE.match(line):
                continue
            match = _SAMPLE.match(line)
            assert match, f"unexpected sample line {line!r}"
            name, model, reason, version, value = match.groups()
            assert name in typed, f"{name} has no TYPE line before its samples"
            if reason is not None:
                samples[(f"{name}:{reason}", model, version)] = float(value)
                total = samples.get((name, model, version), 0.0)
                samples[(name, model, version)] = total + float(value)
            else:
                samples[(name, model, version)] = float(value)
    return samples
