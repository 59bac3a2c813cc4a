"""InFlight: what the core's and the schedulers' graceful stops wait on."""

from __future__ import annotations

import asyncio

import pytest

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
