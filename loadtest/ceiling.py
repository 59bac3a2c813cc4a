"""In-process onnxruntime throughput of a model: the ceiling a server on this machine can reach.

The session gets the server's settings for a one-instance CPU model (intra-op threads = cores,
ORT_ENABLE_ALL graph optimizations) so that served / ceiling isolates the cost of serving
(gRPC, decoding, queueing, batching) from the cost of the model itself.

    .venv/bin/python -m loadtest ceiling --batch-sizes 1 8 32 64 --duration 3
    .venv/bin/python -m loadtest ceiling --model path/to/model.onnx --batch-sizes 16
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import onnxruntime as ort

__all__ = ["CeilingPoint", "measure_ceiling", "session_threads"]

MAX_RUNS_PER_ROUND = 100_000  # bounds a round whatever the clock does


@dataclass(frozen=True)
class CeilingPoint:
    """Throughput of back-to-back ``session.run`` calls at one batch size."""

    batch_size: int
    runs: int  # in the best round
    seconds: float
    threads: int

    @property
    def samples_per_s(self) -> float:
        return self.batch_size * self.runs / self.seconds

    @property
    def ms_per_run(self) -> float:
        return self.seconds / self.runs * 1e3

    def to_dict(self) -> dict[str, float | int]:
        return {**asdict(self), "samples_per_s": self.samples_per_s, "ms_per_run": self.ms_per_run}


def session_threads() -> int:
    """Intra-op threads the server gives a model with one instance: all usable cores."""
    return os.cpu_count() or 1


def _session(model_path: Path, threads: int) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3
    return ort.InferenceSession(str(model_path), options, providers=["CPUExecutionProvider"])


def _feed(session: ort.InferenceSession, batch: int, rng: np.random.Generator) -> dict[str, object]:
    """Random FP32 inputs; the first symbolic dim is the batch, others must be fixed."""
    feed: dict[str, object] = {}
    for arg in session.get_inputs():
        if arg.type != "tensor(float)":
            raise ValueError(f"input '{arg.name}' is {arg.type}; only float inputs are supported")
        shape = list(arg.shape)
        if shape and not isinstance(shape[0], int):
            shape[0] = batch
        if not all(isinstance(d, int) for d in shape):
            raise ValueError(f"input '{arg.name}' has a symbolic non-batch dim: {arg.shape}")
        feed[arg.name] = rng.standard_normal([int(d) for d in shape], dtype=np.float32)
    return feed


def _timed_runs(
    session: ort.InferenceSession, feed: dict[str, object], seconds: float
) -> tuple[int, float]:
    runs, start = 0, time.perf_counter()
    deadline = start + seconds
    while runs < MAX_RUNS_PER_ROUND and (runs == 0 or time.perf_counter() < deadline):
        session.run(None, feed)
        runs += 1
    return runs, time.perf_counter() - start


def measure_ceiling(
    model_path: Path,
    batch_sizes: Sequence[int],
    *,
    duration: float = 3.0,
    rounds: int = 3,
    warmup_runs: int = 5,
    threads: int | None = None,
) -> list[CeilingPoint]:
    """Best samples/s per batch size over ``rounds`` rounds of ``duration / rounds`` seconds.

    Rounds go round-robin over the batch sizes, and the best round is kept: a ceiling is what
    the model can do, and on a shared machine a slow round measures the neighbours instead.
    """
    threads = threads or session_threads()
    session = _session(model_path, threads)
    rng = np.random.default_rng(0)
    feeds = {batch: _feed(session, batch, rng) for batch in batch_sizes}
    for feed in feeds.values():
        for _ in range(warmup_runs):
            session.run(None, feed)
    best: dict[int, CeilingPoint] = {}
    for _ in range(rounds):
        for batch, feed in feeds.items():
            runs, seconds = _timed_runs(session, feed, duration / rounds)
            point = CeilingPoint(batch, runs, seconds, threads)
            if batch not in best or point.samples_per_s > best[batch].samples_per_s:
                best[batch] = point
    return [best[b] for b in batch_sizes]
