"""Real Triton clients at concurrency 1 on add_sub: each client's p50 through the gateway
against its own p50 over gRPC straight to the service, paths alternating in rounds (the
gateway's target: REST <= 1.5 x gRPC per client). ``tritonclient`` runs in the client
environment (``.venv-client`` or CLIENT_PYTHON: it needs protobuf < 7); ``perf_analyzer``
is PERF_ANALYZER or on PATH (loadtest/README.md). A client not installed is reported as
absent, not as a failure."""

from __future__ import annotations

import json
import os
import re
import shutil
import statistics
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from loadtest import REPO_ROOT


@dataclass
class ClientRatio:
    """One client's p50s (µs) per round on each path; ``missing`` says why there are none."""

    client: str
    grpc_us: list[float] = field(default_factory=list)
    http_us: list[float] = field(default_factory=list)
    missing: str = ""

    @property
    def grpc(self) -> float:
        return statistics.median(self.grpc_us)

    @property
    def http(self) -> float:
        return statistics.median(self.http_us)

    @property
    def ratio(self) -> float:
        return self.http / self.grpc


_TRITONCLIENT = r"""
import json, sys, time
import numpy as np
import tritonclient.grpc as tg
import tritonclient.http as th

grpc_url, http_url, rounds, count = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])

def setup(module, url):
    client = module.InferenceServerClient(url)
    data = np.arange(16, dtype=np.float32).reshape(1, 16)
    inputs = [module.InferInput(n, [1, 16], "FP32") for n in ("INPUT0", "INPUT1")]
    for tensor in inputs:
        tensor.set_data_from_numpy(data)
    for _ in range(100):
        client.infer("add_sub", inputs)
    return client, inputs

clients = {"grpc": setup(tg, grpc_url), "http": setup(th, http_url)}
out = {"grpc": [], "http": []}
for index in range(rounds):
    for path in (("grpc", "http") if index % 2 == 0 else ("http", "grpc")):
        client, inputs = clients[path]
        latencies = []
        for _ in range(count):
            start = time.perf_counter()
            client.infer("add_sub", inputs)
            latencies.append((time.perf_counter() - start) * 1e6)
        latencies.sort()
        out[path].append(latencies[len(latencies) // 2])
print(json.dumps(out))
"""


def measure_tritonclient(grpc_url: str, http_url: str, rounds: int, count: int) -> ClientRatio:
    result = ClientRatio("tritonclient (python)")
    python = os.environ.get("CLIENT_PYTHON", str(REPO_ROOT / ".venv-client" / "bin" / "python"))
    if not Path(python).exists():
        result.missing = f"no client environment at {python} (./scripts/bootstrap.sh test)"
        return result
    args = [python, "-c", _TRITONCLIENT, grpc_url, http_url, str(rounds), str(count)]
    done = subprocess.run(args, capture_output=True, text=True, timeout=60 + rounds * count)
    if done.returncode != 0:
        result.missing = f"tritonclient run failed: {done.stderr.strip()[-300:]}"
        return result
    values = json.loads(done.stdout.strip().splitlines()[-1])
    result.grpc_us, result.http_us = values["grpc"], values["http"]
    return result


def perf_analyzer_binary() -> str | None:
    return os.environ.get("PERF_ANALYZER") or shutil.which("perf_analyzer")


def _perf_analyzer_env(binary: str) -> dict[str, str]:
    """perf_analyzer from the tritonclient 2.45 wheel loads libcudart.so.12: take it from
    nvidia-cuda-runtime-cu12 in the same virtual environment, when it is there."""
    env = dict(os.environ)
    venv = Path(binary).resolve().parent.parent
    found = sorted(venv.glob("lib/python*/site-packages/nvidia/cuda_runtime/lib"))
    if found:
        paths = [str(found[-1]), env.get("LD_LIBRARY_PATH", "")]
        env["LD_LIBRARY_PATH"] = ":".join(p for p in paths if p)
    return env


_LATENCY = re.compile(r"Concurrency: 1, throughput: [\d.]+ infer/sec, latency (\d+) usec")


def _perf_analyzer_p50(binary: str, protocol: str, url: str, window_ms: int) -> float:
    args = [
        binary,
        *("-m", "add_sub", "-i", protocol, "-u", url),
        *("--shape", "INPUT0:16", "--shape", "INPUT1:16"),
        *("--concurrency-range", "1", "--percentile=50"),
        # A shared machine never looks "stable" by the default 10 %: take 3 windows as
        # they come (their mean p50); the rounds around it give the median.
        *("--measurement-interval", str(window_ms), "-s", "1000", "-r", "3"),
    ]
    done = subprocess.run(
        args, capture_output=True, text=True, timeout=120, env=_perf_analyzer_env(binary)
    )
    match = _LATENCY.search(done.stdout)
    if done.returncode != 0 or match is None:
        tail = (done.stdout + done.stderr).strip()[-300:]
        raise RuntimeError(f"perf_analyzer -i {protocol} failed: {tail}")
    return float(match.group(1))


def measure_perf_analyzer(
    grpc_url: str, http_url: str, rounds: int, window_ms: int = 2000
) -> ClientRatio:
    result = ClientRatio("perf_analyzer (C++; HTTP: libcurl)")
    binary = perf_analyzer_binary()
    if binary is None:
        result.missing = "perf_analyzer not found (PERF_ANALYZER or PATH; see loadtest/README.md)"
        return result
    try:
        for index in range(rounds):
            order = ("grpc", "http") if index % 2 == 0 else ("http", "grpc")
            for protocol in order:
                url = grpc_url if protocol == "grpc" else http_url
                p50 = _perf_analyzer_p50(binary, protocol, url, window_ms)
                (result.grpc_us if protocol == "grpc" else result.http_us).append(p50)
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
        result.missing = str(exc)
    return result
