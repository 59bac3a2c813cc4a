"""InFlight: what the core's and the schedulers' graceful stops wait on."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from service.core.inference_server import InferenceServer
from service.core.lifecycle import ModelManager
from service.scheduling.inflight import InFlight


async def test_drained_waits_for_every_piece_of_work_even_failed_ones() -> None:
    inflight = InFlight()
    await asyncio.wait_for(inflight.drained(), 1)  # nothing accepted: returns at once
    release = asyncio.Event()

    async def work(fail: bool) -> None:
        with inflight:
            await release.wait()
            if fail:
                raise RuntimeError("boom")

    tasks = [asyncio.create_task(work(fail)) for fail in (False, True)]
    await asyncio.sleep(0)
    assert inflight.count == 2
    waiter = asyncio.create_task(inflight.drained())
    await asyncio.sleep(0.01)
    assert not waiter.done()
    release.set()
    await asyncio.wait_for(waiter, 1)
    assert inflight.count == 0
    with pytest.raises(RuntimeError, match="boom"):
        await tasks[1]
    await tasks[0]


async def test_core_drain_reports_whether_inferences_finished_in_time(tmp_path: Path) -> None:
    """True at once when idle, even with 0 seconds (with --exit-timeout-secs 0 the stop
    goes on to the unloads, which have no time either: exit 1 if a model is loaded, as
    Triton); False when one is still in flight after the timeout (the server then exits
    1)."""
    core = InferenceServer(ModelManager([tmp_path]))
    assert await core.drain(0)
    with core._inflight:
        assert not await core.drain(0.01)
    assert await core.drain(0)
