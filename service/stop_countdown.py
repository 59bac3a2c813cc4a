"""Triton's core stop as its log shows it (core ``InferenceServer::Stop``, r24.10).

Once a second, counting the exit timeout left after the HTTP step down:
``Timeout N: Found M model versions that have in-flight inferences`` and a line per such
model version, until none is left; then ``All models are stopped, unloading models`` and
``Timeout N: Found K live models and 0 in-flight non-inference requests`` until every
model is unloaded. Work left when N reaches 0 is Triton's exit timeout (exit code 1): so
is a model still unloading, as in Triton, where an exit timeout spent on HTTP connections
(an idle pooled client holds one open) ends with exit code 1. Kept apart from the steps
themselves (``runtime.py``), which wake as soon as the work is done rather than on the
second; N is read from the clock.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable

from .core.model import ModelEntry, ModelState

__all__ = ["InFlightModel", "busy_versions", "live_versions", "log_in_flight", "log_live"]

log = logging.getLogger("service")

#: (name, version, in-flight inferences) of one model version.
InFlightModel = tuple[str, int, int]

_LIVE = (ModelState.LOADING, ModelState.READY, ModelState.UNLOADING)


def whole_seconds(left: float) -> int:
    """Triton's countdown value for ``left`` seconds: whole seconds, rounded up (a
    timeout of 30 reads 30 at its start), never negative."""
    return max(0, math.ceil(left - 1e-3))


def busy_versions(entries: Iterable[ModelEntry]) -> list[InFlightModel]:
    """The model versions with inferences queued or executing (the pending-request
    gauge's count), in name and version order."""
    busy = []
    for entry in entries:
        for number, model in sorted(entry.versions.items()):
            count = model.scheduler.inflight if model.scheduler is not None else 0
            if count:
                busy.append((entry.name, number, count))
    return sorted(busy)


def live_versions(entries: Iterable[ModelEntry]) -> int:
    """Model versions loading, ready or unloading: Triton's live models."""
    return sum(1 for e in entries for m in e.versions.values() if m.state in _LIVE)


def log_in_flight(left: float, busy: list[InFlightModel]) -> None:
    log.info(
        "Timeout %d: Found %d model versions that have in-flight inferences",
        whole_seconds(left),
        len(busy),
    )
    for name, version, count in busy:
        log.info("Model '%s' (version %d) has %d in-flight inferences", name, version, count)


def log_live(left: float, live: int) -> None:
    log.info(
        "Timeout %d: Found %d live models and 0 in-flight non-inference requests",
        whole_seconds(left),
        live,
    )
