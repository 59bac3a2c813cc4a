"""gRPC unary calls driven by h2load, and what a server counted.

h2load (Debian's ``nghttp2-client``) is a C HTTP/2 client: it POSTs one prebuilt body over
``-c`` connections with ``-m`` streams each, so the client costs the shared cores little. A
failed gRPC call is still HTTP 200 (its status is in the trailers), so successes are
counted by the server's own statistics instead.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import grpc

from inference import grpc_service_pb2 as pb
from inference import grpc_service_pb2_grpc as pb_grpc

INSTALL_HINT = "h2load not found (Debian: apt-get install nghttp2-client)"
_STATUS_2XX = re.compile(r"status codes: (\d+) 2xx")
_SUCCEEDED = re.compile(r"requests: \d+ total, \d+ started, \d+ done, (\d+) succeeded")
_FINISHED = re.compile(r"finished in [\d.]+s, ([\d.]+) req/s")


def have_h2load() -> bool:
    return shutil.which("h2load") is not None


def grpc_body(message: bytes) -> bytes:
    """One uncompressed gRPC message frame: flag 0, 4-byte big-endian length, message."""
    return b"\x00" + len(message).to_bytes(4, "big") + message


def h2load(
    url: str, body: Path, connections: int, streams: int, seconds: float, threads: int = 1,
    warmup: float = 0.0, rest_path: str = "",
) -> str:  # fmt: skip
    """POST ``body`` to ModelInfer for ``seconds`` (after ``warmup``); h2load's report.
    ``rest_path``: POST it to that path of a REST server over HTTP/1.1 instead (JSON)."""
    if rest_path:
        target = ["--h1", f"http://{url}{rest_path}", "-H", "content-type: application/json"]
    else:
        target = [f"http://{url}/inference.GRPCInferenceService/ModelInfer"]
        target += ["-H", "content-type: application/grpc", "-H", "te: trailers"]
    command = [
        *("h2load", *target, "-d", str(body)),
        *("-c", str(connections), "-m", str(streams), "-D", f"{max(1, round(seconds * 1e3))}ms"),
        *("-t", str(max(1, min(threads, connections)))),  # a connection per thread at least
        *(("--warm-up-time", f"{round(warmup * 1e3)}ms") if warmup > 0 else ()),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=seconds + warmup + 60)
    if done.returncode != 0:
        raise RuntimeError(f"h2load failed ({done.returncode}): {done.stdout}{done.stderr}")
    return done.stdout


def answered(out: str) -> int:
    """HTTP 2xx answers in an h2load report."""
    found = _STATUS_2XX.search(out) or _SUCCEEDED.search(out)
    if found is None:
        raise RuntimeError(f"h2load reported no answers: {out}")
    return int(found.group(1))


def h2load_rate(out: str) -> float:
    """Requests per second in an h2load report (NaN when it has none)."""
    found = _FINISHED.search(out)
    return float(found.group(1)) if found else float("nan")


def model_successes(url: str, model: str) -> int:
    """``inference_stats.success.count`` of ``model`` (all versions), from ModelStatistics."""
    with grpc.insecure_channel(url) as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        reply = stub.ModelStatistics(pb.ModelStatisticsRequest(name=model), timeout=10)
    return sum(s.inference_stats.success.count for s in reply.model_stats)
