"""In-process onnxruntime throughput of a model: the ceiling a server here can reach.

The session gets the server's settings for a one-instance CPU model (intra-op threads =
cores, ORT_ENABLE_ALL, no spinning), so that served / ceiling isolates the cost of serving
from the cost of the model itself.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import onnxruntime as ort

MAX_RUNS_PER_ROUND = 100_000  # bounds a round whatever the clock does


@dataclass(frozen=True)
class CeilingPoint:
    """Back-to-back ``session.run`` calls at one batch size (its best round)."""

    batch_size: int
    runs: int
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


def _feed(session: ort.InferenceSession, batch: int, rng: np.random.Generator) -> dict[str, object]:
    """Random FP32 inputs; the first symbolic dim is the batch, others must be fixed."""
    feed: dict[str, object] = {}
    for arg in session.get_inputs():
        shape = list(arg.shape)
        if shape and not isinstance(shape[0], int):
            shape[0] = batch
        if arg.type != "tensor(float)" or not all(isinstance(d, int) for d in shape):
            raise ValueError(f"input '{arg.name}' ({arg.type} {arg.shape}): float, fixed dims")
        feed[arg.name] = rng.standard_normal(shape, dtype=np.float32)
    return feed


def measure_ceiling(
    model_path: Path, batch_sizes: Sequence[int], *, duration: float = 3.0, rounds: int = 3,
    threads: int | None = None, spinning: bool = False,
) -> list[CeilingPoint]:  # fmt: skip
    """Best samples/s per batch size over ``rounds`` rounds of ``duration / rounds`` s.

    Rounds go round-robin over the batch sizes and the best is kept: a ceiling is what the
    model can do, and on a shared machine a slow round measures the neighbours instead.
    """
    threads = threads or os.cpu_count() or 1
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3
    # As the server's instances (backends/onnxruntime/backend.py): no spinning between runs
    # unless the model asks (allow_spinning); a spinning ceiling would not be the same model.
    spin = "1" if spinning else "0"
    options.add_session_config_entry("session.intra_op.allow_spinning", spin)
    options.add_session_config_entry("session.inter_op.allow_spinning", spin)
    session = ort.InferenceSession(str(model_path), options, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    feeds = {batch: _feed(session, batch, rng) for batch in batch_sizes}
    for feed in feeds.values():
        for _ in range(5):
            session.run(None, feed)
    best: dict[int, CeilingPoint] = {}
    for _ in range(rounds):
        for batch, feed in feeds.items():
            runs, start = 0, time.perf_counter()
            deadline = start + duration / rounds
            while runs < MAX_RUNS_PER_ROUND and (runs == 0 or time.perf_counter() < deadline):
                session.run(None, feed)
                runs += 1
            point = CeilingPoint(batch, runs, time.perf_counter() - start, threads)
            if batch not in best or point.samples_per_s > best[batch].samples_per_s:
                best[batch] = point
    return [best[b] for b in batch_sizes]
