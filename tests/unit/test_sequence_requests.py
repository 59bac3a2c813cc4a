"""The sequence batcher over a request backend (what Python models get): control tensors
and input state per request, Direct's null requests for empty slots, Oldest batches,
parameters and per-request errors. A fake instance records what it is handed."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from executed import executed_rows
from google.protobuf import text_format

from inference import model_config_pb2 as mc
from service.backends.base import BackendRequest, InstanceSpec, RequestInstance, ResponseSender
from service.errors import Internal
from service.scheduling.base import Job
from service.scheduling.instances import InstancePool, InstanceWorker
from service.scheduling.sequence.batcher import SequenceBatchScheduler
from service.statistics import ModelStats


class RecordingModel:
    """OUTPUT = INPUT + 100 * START for each request; a request with parameter
    ``fail`` gets an error response instead. Every ``execute_requests`` call is logged."""

    def __init__(self) -> None:
        self.spec = InstanceSpec(name="m_0", kind="KIND_CPU", device_id=0, threads=1)
        self.calls: list[list[BackendRequest]] = []
        self._lock = threading.Lock()

    def signature(self) -> None:
        return None

    def execute_requests(
        self, requests: Sequence[BackendRequest], senders: Sequence[ResponseSender]
    ) -> None:
        with self._lock:
            self.calls.append(list(requests))
        for request, sender in zip(requests, senders, strict=True):
            if request.parameters.get("fail"):
                sender.send(error="the model refused", final=True)
                continue
            out = request.inputs["INPUT"] + 100 * request.inputs["START"]
            sender.send({"OUTPUT": out}, final=True)

    def close(self) -> None:
        pass


CONFIG = """
name: "pyseq" max_batch_size: {mbs}
sequence_batching {{ {strategy}
  control_input [
    {{ name: "START" control [ {{ kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] }} ] }},
    {{ name: "READY" control [ {{ kind: CONTROL_SEQUENCE_READY bool_false_true: [ 0, 1 ] }} ] }},
    {{ name: "CORRID" control [ {{ kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_STRING }} ] }}
  ]
  state [ {{ input_name: "IN_S" output_name: "OUT_S" data_type: TYPE_FP32 dims: [ 2 ]
             initial_state {{ data_type: TYPE_FP32 dims: [ 2 ] zero_data: true name: "z" }} }} ]
}}
"""


def make(
    mbs: int = 2, strategy: str = ""
) -> tuple[SequenceBatchScheduler, RecordingModel, ModelStats]:
    config = text_format.Parse(CONFIG.format(mbs=mbs, strategy=strategy), mc.ModelConfig())
    model = RecordingModel()
    assert isinstance(model, RequestInstance)
    stats = ModelStats()
    batch = [-1] if mbs else []
    declared = {n: [*batch, 1] for n in ("START", "READY", "CORRID")} | {"IN_S": [*batch, 2]}
    scheduler = SequenceBatchScheduler(
        config, InstancePool([InstanceWorker(model)]), stats, declared, Path(".")
    )
    return scheduler, model, stats


def job(cid: str, value: int, start: bool = False, end: bool = False, **params: Any) -> Job:
    return Job(
        {"INPUT": np.array([[value]], dtype=np.int32)},
        ["OUTPUT"],
        1,
        request_id=f"{cid}-{value}",
        correlation_id=cid,
        sequence_start=start,
        sequence_end=end,
        parameters=params,
    )


@pytest.fixture(autouse=True)
def no_test_hooks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRITONSERVER_DELAY_SCHEDULER", raising=False)
    monkeypatch.delenv("TRITONSERVER_BACKLOG_DELAY_SCHEDULER", raising=False)


async def _out(scheduler: SequenceBatchScheduler, request: Job) -> int:
    return int((await scheduler.submit(request)).outputs["OUTPUT"][0, 0])


async def test_each_request_gets_its_own_control_and_state_rows() -> None:
    scheduler, model, stats = make()
    try:
        assert await _out(scheduler, job("a", 5, start=True, note="x")) == 105
        assert await _out(scheduler, job("a", 6, end=True)) == 6
    finally:
        await scheduler.stop()
    first, second = (call[0] for call in model.calls)
    assert [len(call) for call in model.calls] == [1, 1]
    for name, value in (("START", 1), ("READY", True)):
        assert first.inputs[name].shape == (1, 1) and first.inputs[name][0, 0] == value
    assert first.inputs["CORRID"].tolist() == [[b"a"]]
    assert first.inputs["IN_S"].shape == (1, 2) and first.inputs["IN_S"].dtype == np.float32
    assert (first.correlation_id, first.sequence_start, first.sequence_end) == ("a", True, False)
    assert first.parameters == {"note": "x"} and first.request_id == "a-5"
    assert first.requested_outputs == ["OUTPUT"]
    assert second.inputs["START"][0, 0] == 0 and second.sequence_end
    np.testing.assert_array_equal(second.inputs["IN_S"], [[0, 0]])  # never updated
    assert executed_rows(stats) == 2 and stats.execution_count == 2


async def test_direct_empty_slot_is_a_null_request() -> None:
    """Slot 0's sequence ended, slot 1's goes on: the execution holds a null request for
    slot 0 (zeros, not READY, CORRID empty, no flags, nothing requested), as Triton's."""
    scheduler, model, stats = make()
    try:
        await scheduler.submit(job("a", 1, start=True))  # slot 0
        await scheduler.submit(job("b", 2, start=True))  # slot 1
        await scheduler.submit(job("a", 3, end=True))  # slot 0 frees
        assert await _out(scheduler, job("b", 7)) == 7
    finally:
        await scheduler.stop()
    null, real = model.calls[-1]
    assert null.inputs["READY"].tolist() == [[False]] and null.inputs["INPUT"].tolist() == [[0]]
    assert null.inputs["CORRID"].tolist() == [[b""]] and null.requested_outputs == []
    assert null.correlation_id is None and not null.sequence_start and not null.parameters
    assert real.inputs["READY"].tolist() == [[True]] and real.correlation_id == "b"
    assert executed_rows(stats) == 4  # the null request is not counted


async def test_oldest_hands_requests_of_several_sequences_to_one_execute() -> None:
    scheduler, model, _ = make(mbs=4, strategy="oldest { max_candidate_sequences: 4 }")
    try:
        results = await asyncio.gather(
            _out(scheduler, job("a", 1, start=True)),
            _out(scheduler, job("a", 2, end=True)),
            _out(scheduler, job("b", 10, start=True, end=True)),
        )
    finally:
        await scheduler.stop()
    assert results == [101, 2, 110]
    assert [sorted(r.correlation_id for r in call) for call in model.calls] == [["a", "b"], ["a"]]
    assert all(r.inputs["READY"][0, 0] for call in model.calls for r in call)


async def test_an_error_response_fails_only_its_request() -> None:
    scheduler, _, _ = make(mbs=4, strategy="oldest { max_candidate_sequences: 4 }")
    try:
        good, bad = await asyncio.gather(
            scheduler.submit(job("a", 1, start=True, end=True)),
            scheduler.submit(job("b", 2, start=True, end=True, fail=True)),
            return_exceptions=True,
        )
        assert not isinstance(good, BaseException) and good.outputs["OUTPUT"].tolist() == [[101]]
        assert isinstance(bad, Internal) and bad.message == "the model refused"
        assert await _out(scheduler, job("b", 3, start=True, end=True)) == 103  # serving on
    finally:
        await scheduler.stop()


async def test_unbatched_model_gets_unbatched_controls() -> None:
    scheduler, model, _ = make(mbs=0)
    try:
        request = Job(
            {"INPUT": np.array([4], dtype=np.int32)},
            ["OUTPUT"],
            0,
            correlation_id="u",
            sequence_start=True,
            sequence_end=True,
        )
        assert (await scheduler.submit(request)).outputs["OUTPUT"].tolist() == [104]
    finally:
        await scheduler.stop()
    (only,) = model.calls[0]
    assert only.inputs["START"].shape == (1,) and only.inputs["IN_S"].shape == (2,)
