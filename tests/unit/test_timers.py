"""The drivers' wake-up timer: timerfd on Linux, call_later elsewhere; same behaviour."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Iterator

import pytest

from service.scheduling import timers
from service.scheduling.timers import WakeTimer


@pytest.fixture(params=["timerfd", "call_later"])
def precise(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[bool]:
    if request.param == "timerfd":
        if not timers.precise_timers_available():
            pytest.skip("timerfd is Linux-only")
        yield True
    else:
        monkeypatch.setattr(timers, "_LIBC", None)
        yield False


class Wakes:
    def __init__(self) -> None:
        self.times: list[int] = []
        self.event = asyncio.Event()

    def __call__(self) -> None:
        self.times.append(time.monotonic_ns())
        self.event.set()


async def test_fires_once_and_never_before_its_deadline(precise: bool) -> None:
    wakes = Wakes()
    timer = WakeTimer(wakes)
    now = time.monotonic_ns()
    timer.arm(now + 300_000, now)
    await asyncio.wait_for(wakes.event.wait(), 5)
    await asyncio.sleep(0.01)
    assert len(wakes.times) == 1
    assert wakes.times[0] >= now + 300_000
    assert (timer._fd is not None) == precise
    timer.close()


async def test_rearming_replaces_the_pending_wake(precise: bool) -> None:
    wakes = Wakes()
    timer = WakeTimer(wakes)
    now = time.monotonic_ns()
    timer.arm(now + 5_000_000_000, now)  # far away: must never fire
    now = time.monotonic_ns()
    timer.arm(now + 1_000_000, now)
    await asyncio.wait_for(wakes.event.wait(), 5)
    await asyncio.sleep(0.02)
    assert len(wakes.times) == 1
    timer.close()


async def test_cancel_and_none_prevent_the_wake(precise: bool) -> None:
    wakes = Wakes()
    timer = WakeTimer(wakes)
    now = time.monotonic_ns()
    timer.arm(now + 1_000_000, now)
    timer.cancel()
    now = time.monotonic_ns()
    timer.arm(now + 1_000_000, now)
    timer.arm(None, now)
    await asyncio.sleep(0.02)
    assert wakes.times == []
    timer.close()


async def test_a_deadline_already_passed_wakes_on_the_next_iteration(precise: bool) -> None:
    wakes = Wakes()
    timer = WakeTimer(wakes)
    now = time.monotonic_ns()
    timer.arm(now - 1000, now)
    assert wakes.times == []  # never re-entrant: the driver is inside its step
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert len(wakes.times) == 1
    timer.close()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs /proc/self/fd")
async def test_close_releases_the_file_descriptor() -> None:
    if not timers.precise_timers_available():
        pytest.skip("timerfd is Linux-only")
    before = len(os.listdir("/proc/self/fd"))
    timer = WakeTimer(lambda: None)
    now = time.monotonic_ns()
    timer.arm(now + 1_000_000, now)
    assert len(os.listdir("/proc/self/fd")) == before + 1
    timer.close()
    assert len(os.listdir("/proc/self/fd")) == before


async def test_falls_back_when_the_loop_cannot_watch_descriptors(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if not timers.precise_timers_available():
        pytest.skip("timerfd is Linux-only")
    loop = asyncio.get_running_loop()

    def refuse(*_: object) -> None:
        raise NotImplementedError("no add_reader here")

    monkeypatch.setattr(loop, "add_reader", refuse)
    wakes = Wakes()
    timer = WakeTimer(wakes)
    now = time.monotonic_ns()
    timer.arm(now + 200_000, now)
    await asyncio.wait_for(wakes.event.wait(), 5)
    assert timer._fd is None and not timer._precise
    timer.close()
