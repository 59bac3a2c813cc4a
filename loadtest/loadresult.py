"""Data of a load run: the spec, per-client reports, and the merged result.

Kept apart from the driver so that reports and tables can use them without grpc.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

from loadtest.metrics import summarize_latencies

__all__ = [
    "ClientReport",
    "LoadResult",
    "LoadSpec",
    "Observed",
    "Timeline",
    "merge_reports",
]


@dataclass(frozen=True)
class LoadSpec:
    """What to run; every field has a CLI flag of the same name."""

    url: str
    model: str
    concurrency: int = 8
    duration: float = 10.0
    warmup: float = 2.0
    processes: int = 1
    max_requests: int = 100_000
    timeout: float = 30.0
    batch: int = 1
    dynamic_dim: int = 16
    server_pid: int | None = None


@dataclass(frozen=True)
class Timeline:
    """Wall-clock (time.time) instants shared by all client processes."""

    window_start: float
    window_end: float


@dataclass(frozen=True)
class Observed:
    """Server-side view of the window: mean executed batch (None: unknown) and CPU cores."""

    mean_exec_batch: float | None
    stats_note: str
    server_cpu_cores: float | None
    machine_cpu_cores: float | None  # all processes on the machine
    # The model's own time per execution in the server (compute_infer over executions):
    # against the in-process ceiling it tells a slow execution from a slow path around it.
    mean_exec_ms: float | None = None


@dataclass
class ClientReport:
    """One client process's view of the measured window (picklable)."""

    latencies_ms: list[float] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)
    first_error: str = ""
    sent: int = 0
    capped: bool = False
    last_done: float = 0.0  # wall time of the last completion inside the window
    cpu_s: float = 0.0


@dataclass(frozen=True)
class LoadResult:
    """Throughput and latency of one run; ``mean_exec_batch`` is None when unknown."""

    spec: LoadSpec
    window_s: float
    requests: int
    inferences_per_request: int
    errors: int
    error_codes: dict[str, int]
    first_error: str
    latency_ms: dict[str, float]
    mean_exec_batch: float | None
    stats_note: str
    client_cpu_cores: float
    server_cpu_cores: float | None
    machine_cpu_cores: float | None
    sent: int
    capped: bool
    mean_exec_ms: float | None = None

    @property
    def req_per_s(self) -> float:
        return self.requests / self.window_s if self.window_s > 0 else 0.0

    @property
    def infer_per_s(self) -> float:
        return self.req_per_s * self.inferences_per_request

    @property
    def other_cpu_cores(self) -> float | None:
        """Cores used by other processes on the machine: noise in the measurement."""
        if self.machine_cpu_cores is None or self.server_cpu_cores is None:
            return None
        return max(0.0, self.machine_cpu_cores - self.server_cpu_cores - self.client_cpu_cores)

    def to_dict(self) -> dict[str, Any]:
        derived = {"req_per_s": self.req_per_s, "infer_per_s": self.infer_per_s}
        return {**asdict(self), **derived, "other_cpu_cores": self.other_cpu_cores}

    def summary(self) -> str:
        lat = self.latency_ms
        batch = "n/a" if self.mean_exec_batch is None else f"{self.mean_exec_batch:.2f}"
        server = _fmt(self.server_cpu_cores)
        return (
            f"{self.spec.model} c={self.spec.concurrency}: {self.req_per_s:.1f} req/s, "
            f"{self.infer_per_s:.1f} infer/s, p50/p90/p99 {lat['p50']:.2f}/{lat['p90']:.2f}/"
            f"{lat['p99']:.2f} ms, errors {self.errors}, mean exec batch {batch} "
            f"({_fmt(self.mean_exec_ms)} ms each), "
            f"cpu client/server/others {self.client_cpu_cores:.2f}/{server}/"
            f"{_fmt(self.other_cpu_cores)} cores"
            + (" [CAPPED by --max-requests]" if self.capped else "")
        )


def _fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.2f}"


def merge_reports(
    spec: LoadSpec,
    reports: list[ClientReport],
    timeline: Timeline,
    observed: Observed,
    inferences: int,
) -> LoadResult:
    latencies = [x for r in reports for x in r.latencies_ms]
    errors: Counter[str] = sum((r.errors for r in reports), Counter())
    planned = timeline.window_end - timeline.window_start
    window = planned
    capped = any(r.capped for r in reports)
    if capped:  # the window really ended when the last counted request came back
        window = max(r.last_done for r in reports) - timeline.window_start
    return LoadResult(
        spec=spec,
        window_s=max(window, 0.0),
        requests=len(latencies),
        inferences_per_request=inferences,
        errors=sum(errors.values()),
        error_codes=dict(errors),
        first_error=next((r.first_error for r in reports if r.first_error), ""),
        latency_ms=summarize_latencies(latencies),
        mean_exec_batch=observed.mean_exec_batch,
        mean_exec_ms=observed.mean_exec_ms,
        stats_note=observed.stats_note,
        client_cpu_cores=sum(r.cpu_s for r in reports) / planned,
        server_cpu_cores=observed.server_cpu_cores,
        machine_cpu_cores=observed.machine_cpu_cores,
        sent=sum(r.sent for r in reports),
        capped=capped,
    )
