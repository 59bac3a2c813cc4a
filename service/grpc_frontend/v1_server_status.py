"""The v1 ServerStatus, built from what the core reports (index, configs, statistics).

Model states come from the repository index, configs from the loaded versions (converted
to the v1 schema), statistics from the same ``ModelStats`` the v2 statistics extension
and the metrics read, so the three always agree. v1's ``infer_stats`` map is keyed by the
request's batch size, as Triton 1.x's status manager kept it (``UpdateSuccessInferStats``
/ ``UpdateFailedInferStats``): one entry per batch size the version's requests had, none
before its first request; ``ModelStats.request_sizes`` holds exactly that (decision 055).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from inference import model_config_pb2 as mc
from trtis import server_status_pb2 as ss

from ..core.index import IndexEntry
from ..core.inference_server import VersionStats
from ..statistics import Duration
from .v1_codec import v1_config

__all__ = ["ApiStats", "StatusFacts", "server_status"]

_STATES = {
    "UNKNOWN": ss.MODEL_UNKNOWN,
    "READY": ss.MODEL_READY,
    "UNAVAILABLE": ss.MODEL_UNAVAILABLE,
    "LOADING": ss.MODEL_LOADING,
    "UNLOADING": ss.MODEL_UNLOADING,
}


@dataclass(slots=True)
class ApiStats:
    """Successful calls of the v1 control RPCs (ServerStatus's *_stats), per process."""

    status: Duration = field(default_factory=Duration)
    health: Duration = field(default_factory=Duration)
    model_control: Duration = field(default_factory=Duration)
    shm_control: Duration = field(default_factory=Duration)
    repository: Duration = field(default_factory=Duration)


@dataclass(frozen=True, slots=True)
class StatusFacts:
    """The server-wide part of a status."""

    server_id: str
    version: str
    ready_state: ss.ServerReadyState
    uptime_ns: int


def _stat(d: Duration) -> ss.StatDuration:
    return ss.StatDuration(count=d.count, total_time_ns=d.ns)


def _version_status(entry: IndexEntry, stats: VersionStats | None) -> ss.ModelVersionStatus:
    out = ss.ModelVersionStatus(ready_state=_STATES.get(entry.state, ss.MODEL_UNKNOWN))
    if entry.reason:
        out.ready_state_reason.message = entry.reason
    if stats is None:
        return out
    s = stats.stats
    out.model_execution_count = s.execution_count
    out.model_inference_count = s.inference_count
    out.last_inference_timestamp_milliseconds = s.last_inference_ms
    for size, by_size in sorted(s.request_sizes.items()):
        out.infer_stats[size].CopyFrom(
            ss.InferRequestStats(
                success=_stat(by_size.success),
                failed=_stat(by_size.fail),
                compute=_stat(by_size.compute),
                queue=_stat(by_size.queue),
            )
        )
    return out


def server_status(
    facts: StatusFacts,
    entries: Iterable[IndexEntry],
    configs: Mapping[str, mc.ModelConfig],
    stats: Iterable[VersionStats],
    api: ApiStats,
) -> ss.ServerStatus:
    """One ServerStatus: every model named in ``entries`` (one per version, or one without
    a version for a model that has none loaded)."""
    by_version = {(s.name, s.version): s for s in stats}
    out = ss.ServerStatus(
        id=facts.server_id,
        version=facts.version,
        ready_state=facts.ready_state,
        uptime_ns=facts.uptime_ns,
        status_stats=ss.StatusRequestStats(success=_stat(api.status)),
        health_stats=ss.HealthRequestStats(success=_stat(api.health)),
        model_control_stats=ss.ModelControlRequestStats(success=_stat(api.model_control)),
        shm_control_stats=ss.SharedMemoryControlRequestStats(success=_stat(api.shm_control)),
        repository_stats=ss.RepositoryRequestStats(success=_stat(api.repository)),
    )
    for entry in entries:
        model = out.model_status[entry.name]
        config = configs.get(entry.name)
        if config is not None and not model.HasField("config"):
            model.config.CopyFrom(v1_config(config))
        if entry.version.isdigit():
            version = int(entry.version)
            model.version_status[version].CopyFrom(
                _version_status(entry, by_version.get((entry.name, version)))
            )
    return out
