"""Instance-group updates in place (core/instance_update.py) through the ModelManager.

The model runs on the built-in identity backend; its instances' ``execute_requests`` and
``close`` are wrapped to count closes and, where a test needs an execution in flight, to
block on an event the test sets, so nothing here depends on the machine's speed. The
end-to-end check with a Python model counting ``initialize`` / ``finalize`` is
tests/integration/test_instance_update.py; Triton's own qa file runs as the extra suites
model_update_* (tests/qa_extra/model_update.py).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from inference import model_config_pb2 as mc
from service.backends.builtin import identity
from service.core.lifecycle import ControlMode, ModelManager
from service.core.model import ModelState, ModelVersion
from service.errors import InvalidArgument
from service.scheduling.base import Job
from service.scheduling.rate_limiter import RateLimiter

CONFIG = """
name: "m"
backend: "identity"
max_batch_size: 0
input [{{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }}]
output [{{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] }}]
instance_group [{groups}]
{extra}
"""


def cpu(count: int, limits: str = "") -> str:
    limiter = f" rate_limiter {{ {limits} }}" if limits else ""
    return f"{{ count: {count} kind: KIND_CPU{limiter} }}"


def write(repo: Path, groups: str, extra: str = "") -> None:
    (repo / "m" / "1").mkdir(parents=True, exist_ok=True)
    (repo / "m" / "config.pbtxt").write_text(CONFIG.format(groups=groups, extra=extra))


class Gate:
    """Closed instances, and a gate the executions of one instance (``held``) wait on."""

    def __init__(self) -> None:
        self.closed: list[str] = []
        self.held: object = None
        self.open = threading.Event()
        self.started = threading.Event()

    async def hold(self, model: ModelVersion) -> asyncio.Task[None]:
        """A request running on ``model``'s only instance until ``open`` is set."""
        (self.held,) = instances(model)
        running = asyncio.create_task(infer(model))
        assert await asyncio.to_thread(self.started.wait, 30)
        return running


@pytest.fixture
def gate(monkeypatch: pytest.MonkeyPatch) -> Iterator[Gate]:
    record = Gate()
    execute = identity.IdentityInstance.execute_requests

    def gated(self: identity.IdentityInstance, *args: Any) -> None:
        if self is record.held:
            record.started.set()
            assert record.open.wait(60), "the test never opened the gate"
        execute(self, *args)

    def close(self: identity.IdentityInstance) -> None:
        record.closed.append(self.spec.name)

    monkeypatch.setattr(identity.IdentityInstance, "execute_requests", gated)
    monkeypatch.setattr(identity.IdentityInstance, "close", close)
    yield record
    record.open.set()


@asynccontextmanager
async def manager(repo: Path, limiter: RateLimiter | None = None) -> AsyncIterator[ModelManager]:
    m = ModelManager([repo], mode=ControlMode.EXPLICIT, limiter=limiter)
    await m.start()
    try:
        yield m
    finally:
        await m.unload_all()


def instances(model: ModelVersion) -> list[object]:
    assert model.pool is not None
    return [worker.instance for worker in model.pool.workers]


async def infer(model: ModelVersion) -> None:
    assert model.scheduler is not None
    x = np.arange(4, dtype=np.float32)
    result = await model.scheduler.submit(Job({"INPUT0": x}, ["OUTPUT0"], 0))
    np.testing.assert_array_equal(result.outputs["OUTPUT0"], x)


async def test_adding_keeps_the_serving_instances(tmp_path: Path, gate: Gate) -> None:
    write(tmp_path, cpu(2))
    async with manager(tmp_path) as m:
        await m.load("m")
        old = m.get("m")
        before = instances(old)
        write(tmp_path, cpu(3))
        await m.load("m")
        new = m.get("m")
        assert new is not old and new.stats is old.stats
        after = instances(new)
        assert after[:2] == before and after[2] not in before
        await asyncio.sleep(0)  # the old version retires in the background
        for _ in range(100):
            if old.state is ModelState.UNAVAILABLE:
                break
            await asyncio.sleep(0.05)
        assert old.state is ModelState.UNAVAILABLE
        assert gate.closed == []  # nothing finalized: the old version's are the new one's
        await infer(new)
    assert sorted(gate.closed) == ["m_0_0", "m_0_1", "m_0_2"]  # each closed once, at unload


async def test_removing_closes_only_the_removed_ones(tmp_path: Path, gate: Gate) -> None:
    write(tmp_path, cpu(3))
    async with manager(tmp_path) as m:
        await m.load("m")
        before = instances(m.get("m"))
        write(tmp_path, cpu(1))
        await m.load("m")
        assert instances(m.get("m")) == before[:1]
        assert sorted(gate.closed) == ["m_0_1", "m_0_2"]  # before the load returned
        await infer(m.get("m"))


async def test_an_update_does_not_wait_for_kept_instances(tmp_path: Path, gate: Gate) -> None:
    write(tmp_path, cpu(1))
    async with manager(tmp_path) as m:
        await m.load("m")
        running = await gate.hold(m.get("m"))
        write(tmp_path, cpu(2))
        await asyncio.wait_for(m.load("m"), 30)  # returns with the request still running
        assert not running.done()
        assert len(instances(m.get("m"))) == 2
        gate.open.set()
        await asyncio.wait_for(running, 30)
        assert gate.closed == []


async def test_removed_instances_finish_their_work_first(tmp_path: Path, gate: Gate) -> None:
    write(tmp_path, cpu(1))
    async with manager(tmp_path) as m:
        await m.load("m")
        old = m.get("m")
        running = await gate.hold(old)
        write(tmp_path, cpu(1, 'resources [{ name: "R" count: 1 }]'))  # another signature
        update = asyncio.create_task(m.load("m"))
        for _ in range(20):  # serving the new instance, the load waits for the old one
            await asyncio.sleep(0.05)
            if m.get("m") is not old:
                break
        assert m.get("m") is not old
        await infer(m.get("m"))
        assert not update.done() and gate.closed == []
        gate.open.set()
        await asyncio.wait_for(update, 30)
        await running
        assert gate.closed == ["m_0_0"]


async def test_removing_does_not_wait_for_the_kept_ones(tmp_path: Path, gate: Gate) -> None:
    """A request held on the kept instance and more queued: the load that removes the other
    instance answers with it closed; the held and queued requests are answered after."""
    write(tmp_path, cpu(2))
    async with manager(tmp_path) as m:
        await m.load("m")
        old = m.get("m")
        gate.held = instances(old)[0]  # m_0_0, the one the update keeps
        answered = 0
        running = None
        while running is None:  # the shared queue gives a request to either instance
            task = asyncio.create_task(infer(old))
            while not gate.started.is_set():  # held on m_0_0, or answered by m_0_1
                if (await asyncio.wait([task], timeout=0.01))[0]:
                    break
            if gate.started.is_set():
                running = task
            else:
                await task
                answered += 1
        queued = [asyncio.create_task(infer(old)) for _ in range(4)]
        write(tmp_path, cpu(1))
        await asyncio.wait_for(m.load("m"), 30)
        assert not running.done()
        assert gate.closed == ["m_0_1"]  # finished its own work and closed
        later = asyncio.create_task(infer(m.get("m")))
        gate.open.set()
        await asyncio.wait_for(asyncio.gather(running, later, *queued), 30)
        stats = m.get("m").stats
        assert (stats.execution_count, stats.fail.count) == (answered + 6, 0)
    assert sorted(gate.closed) == ["m_0_0", "m_0_1"]


async def test_other_changes_reload_everything(tmp_path: Path, gate: Gate) -> None:
    write(tmp_path, cpu(2))
    async with manager(tmp_path) as m:
        await m.load("m")
        before = instances(m.get("m"))
        write(
            tmp_path, cpu(3), 'parameters { key: "execute_delay_ms" value { string_value: "0" } }'
        )
        await m.load("m")
        assert not set(instances(m.get("m"))) & set(before)
        assert sorted(gate.closed) == ["m_0_0", "m_0_1"]


async def test_a_config_read_back_from_the_server_updates_in_place(
    tmp_path: Path, gate: Gate
) -> None:
    write(tmp_path, cpu(1))
    async with manager(tmp_path) as m:
        await m.load("m")
        before = instances(m.get("m"))
        shown = mc.ModelConfig()
        shown.CopyFrom(m.config("m"))  # completed: what ModelConfig answers
        shown.instance_group[0].count = 2
        await m.load("m", override=shown)
        assert instances(m.get("m"))[:1] == before
        assert len(instances(m.get("m"))) == 2 and gate.closed == []


async def test_rate_limiter_resources_follow_the_groups(
    tmp_path: Path, gate: Gate, caplog: pytest.LogCaptureFixture
) -> None:
    limiter = RateLimiter()
    write(tmp_path, cpu(1, 'resources [{ name: "R1" count: 4 }]'))
    async with manager(tmp_path, limiter) as m:
        await m.load("m")
        assert limiter._limits == {(0, "R1"): 4}
        write(tmp_path, cpu(1, 'resources [{ name: "R1" count: 3 }]'))
        with caplog.at_level(logging.DEBUG, "service.scheduling.rate_limiter"):
            await m.load("m")
        assert limiter._limits == {(0, "R1"): 3}
        assert gate.closed == ["m_0_0"]  # a new signature: replaced
        assert '\\t\\tResource: R1\\t Count: 3\\n"' in caplog.text  # Triton's escaped line
        await infer(m.get("m"))
    assert limiter._limits == {}


async def test_a_refused_update_keeps_serving_and_closes_what_it_opened(
    tmp_path: Path, gate: Gate
) -> None:
    limiter = RateLimiter([("R1", 10, -1)])
    write(tmp_path, cpu(1, 'resources [{ name: "R1" count: 2 }]'))
    async with manager(tmp_path, limiter) as m:
        await m.load("m")
        old = m.get("m")
        write(tmp_path, cpu(2, 'resources [{ name: "R1" count: 32 }]'))
        with pytest.raises(InvalidArgument) as refused:
            await m.load("m")
        assert 'Resource count for "R1" is limited to 10' in str(refused.value)
        assert m.get("m") is old and old.ready
        assert sorted(gate.closed) == ["m_0_0", "m_0_1"]  # the two opened for the update
        assert limiter._limits == {(0, "R1"): 10}
        await infer(old)


async def test_an_unload_waits_for_the_versions_an_update_left_running(
    tmp_path: Path, gate: Gate
) -> None:
    write(tmp_path, cpu(1))
    async with manager(tmp_path) as m:
        await m.load("m")
        running = await gate.hold(m.get("m"))
        write(tmp_path, cpu(2))
        await asyncio.wait_for(m.load("m"), 30)
        unload = asyncio.create_task(m.unload("m"))
        await asyncio.sleep(0.2)
        # The kept instance still runs the old version's request: not closed under it.
        assert not unload.done() and "m_0_0" not in gate.closed
        gate.open.set()
        await asyncio.wait_for(unload, 30)
        await running
        assert sorted(gate.closed) == ["m_0_0", "m_0_1"]
