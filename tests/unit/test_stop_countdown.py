"""Triton's core stop countdown values and what it counts (``service/stop_countdown.py``)."""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any, cast

import pytest

from service.core.model import ModelEntry, ModelState
from service.stop_countdown import (
    busy_versions,
    live_versions,
    log_in_flight,
    log_live,
    whole_seconds,
)


def _entry(name: str, versions: dict[int, tuple[ModelState, int | None]]) -> ModelEntry:
    """An entry whose versions have a state and a scheduler with that many in flight
    (None: no scheduler, an unloaded version)."""
    made = {
        number: SimpleNamespace(
            state=state, scheduler=None if count is None else SimpleNamespace(inflight=count)
        )
        for number, (state, count) in versions.items()
    }
    return cast(ModelEntry, SimpleNamespace(name=name, versions=made))


def test_whole_seconds_count_down_from_the_timeout() -> None:
    assert whole_seconds(30.0) == 30
    assert whole_seconds(29.9995) == 30
    assert whole_seconds(29.2) == 30
    assert whole_seconds(28.9) == 29
    assert whole_seconds(0.0) == 0
    assert whole_seconds(-0.5) == 0


def test_busy_and_live_versions() -> None:
    entries = [
        _entry("b", {1: (ModelState.READY, 2), 2: (ModelState.READY, 0)}),
        _entry("a", {3: (ModelState.UNLOADING, 1), 4: (ModelState.UNAVAILABLE, None)}),
    ]
    assert busy_versions(entries) == [("a", 3, 1), ("b", 1, 2)]
    assert live_versions(entries) == 3


def test_the_lines_read_as_tritons(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="service"):
        log_in_flight(27.0, [("gated", 1, 2)])
        log_live(0.0, 1)
    lines: list[Any] = [r.getMessage() for r in caplog.records]
    assert lines == [
        "Timeout 27: Found 1 model versions that have in-flight inferences",
        "Model 'gated' (version 1) has 2 in-flight inferences",
        "Timeout 0: Found 1 live models and 0 in-flight non-inference requests",
    ]
