"""The sequence batcher's parts: SequenceTable bookkeeping, control and state tensors, and
the driver itself over fake instances (no ONNX runtime involved)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from executed import executed_rows
from google.protobuf import text_format

from inference import model_config_pb2 as mc
from service.backends.base import InstanceSpec, TimedOutputs
from service.errors import Cancelled, InvalidArgument, Unavailable
from service.repository.completion import ModelSignature
from service.scheduling.base import Job
from service.scheduling.instances import InstancePool, InstanceWorker
from service.scheduling.sequence.batcher import SequenceBatchScheduler
from service.scheduling.sequence.slots import SequenceTable
from service.scheduling.sequence.states import state_specs
from service.scheduling.sequence.tensors import build_sequence_inputs, control_specs
from service.statistics import ModelStats

START_FLAG = "must specify the START flag"


def job(
    cid: int | str | None,
    start: bool = False,
    end: bool = False,
    value: int = 0,
    rows: int = 1,
) -> Job:
    return Job(
        {"INPUT": np.full((rows, 1), value, dtype=np.int32)},
        ["OUTPUT"],
        rows,
        correlation_id=cid,
        sequence_start=start,
        sequence_end=end,
    )


# ----------------------------------------------------------------------------- SequenceTable


def test_new_sequences_spread_over_instances() -> None:
    table = SequenceTable("m", instances=2, capacity=2, idle_ns=0)
    placed = [table.accept(job(cid, start=True), 0) for cid in (1, 2, 3, 4)]
    assert [(s.instance, s.slot) for s in placed] == [(0, 0), (1, 0), (0, 1), (1, 1)]
    assert table.rooms(0) == [placed[0], placed[2]]
    assert table.rooms(1) == [placed[1], placed[3]]
    assert len(table) == 4
    assert all(s.head is not None for s in placed)


def test_placement_prefers_the_instance_with_most_free_rooms() -> None:
    table = SequenceTable("m", instances=3, capacity=2, idle_ns=0)
    a, b, c = (table.accept(job(cid, start=True), 0) for cid in (1, 2, 3))
    assert [s.instance for s in (a, b, c)] == [0, 1, 2]
    table.release(b)
    d = table.accept(job(4, start=True), 0)
    assert (d.instance, d.slot) == (1, 0)  # instance 1 has two free rooms again


def test_full_table_backlog_is_fifo_and_release_promotes_the_oldest() -> None:
    table = SequenceTable("m", instances=2, capacity=2, idle_ns=0)
    live = {cid: table.accept(job(cid, start=True), 0) for cid in (1, 2, 3, 4)}
    waiting = [table.accept(job(cid, start=True), 0) for cid in (5, 6, 7)]
    assert all(s.instance is None and s.head is None for s in waiting)
    assert table.backlog_count() == 3
    assert table.pending_count() == 7

    live[2].pending.clear()
    table.release(live[2])  # (1, 0) frees: sequence 5 takes it
    assert (waiting[0].instance, waiting[0].slot) == (1, 0)
    assert waiting[0].head is not None
    live[1].pending.clear()
    table.release(live[1])  # (0, 0) frees: sequence 6
    assert (waiting[1].instance, waiting[1].slot) == (0, 0)
    assert waiting[2].instance is None
    assert table.backlog_count() == 1
    assert 2 not in {s.cid for s in table.sequences()}


def test_backlogged_sequence_collects_its_requests_in_order() -> None:
    table = SequenceTable("m", instances=1, capacity=1, idle_ns=0)
    first = table.accept(job(1, start=True), 0)
    queued = table.accept(job(2, start=True, value=10), 0)
    table.accept(job(2, value=11), 0)
    table.accept(job(2, value=12, end=True), 0)
    assert table.backlog_count() == 3
    assert queued.ending
    first.pending.clear()
    table.release(first)
    assert queued.instance == 0
    assert [int(j.inputs["INPUT"][0, 0]) for j in queued.pending] == [10, 11, 12]
    assert queued.head is queued.pending[0]


def test_releasing_a_backlogged_sequence_drops_it_from_the_backlog() -> None:
    table = SequenceTable("m", instances=1, capacity=1, idle_ns=0)
    first = table.accept(job(1, start=True), 0)
    gone = table.accept(job(2, start=True), 0)
    kept = table.accept(job(3, start=True), 0)
    gone.pending.clear()
    table.release(gone)
    assert table.backlog_count() == 1
    first.pending.clear()
    table.release(first)
    assert kept.instance == 0 and gone.instance is None
    assert {s.cid for s in table.sequences()} == {3}


def test_accept_errors() -> None:
    table = SequenceTable("acc", instances=1, capacity=2, idle_ns=0)
    with pytest.raises(InvalidArgument, match=START_FLAG) as info:
        table.accept(job(9), 0)
    assert str(info.value) == (
        "inference request for sequence 9 to model 'acc' must specify the START flag on the "
        "first request of the sequence"
    )
    sequence = table.accept(job(9, start=True), 0)
    table.accept(job(9, end=True), 0)
    with pytest.raises(InvalidArgument, match=START_FLAG):
        table.accept(job(9), 0)  # after END only a new START is accepted
    sequence.pending.clear()
    table.release(sequence)
    again = table.accept(job(9, start=True), 0)
    assert again is not sequence and again.states is None


def test_start_on_a_live_sequence_joins_it_with_triton_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Triton ends the old sequence early: its queued requests run, then the new START,
    in the same slot; a warning in Triton's words says so."""
    table = SequenceTable("acc", instances=1, capacity=2, idle_ns=0)
    first = table.accept(job(9, start=True, value=1), 0)
    with caplog.at_level("WARNING"):
        second = table.accept(job(9, start=True, value=2), 5)
    assert second is first and len(table) == 1
    assert [int(j.inputs["INPUT"][0, 0]) for j in first.pending] == [1, 2]
    assert first.pending[1].sequence_start and first.last_ns == 5
    assert caplog.messages == [
        "sequence 9 for model 'acc' has a conflict. The previous sequence did not end before "
        "this sequence start. Previous sequence will be terminated early."
    ]
    assert table.accept(job(9, value=3), 6) is first  # the restarted sequence goes on


def test_start_after_an_accepted_end_begins_a_second_sequence() -> None:
    """Once END is accepted the ID is free: a START gets its own room while the ended
    sequence still has queued requests, and each is released on its own."""
    table = SequenceTable("acc", instances=1, capacity=2, idle_ns=0)
    old = table.accept(job(4, start=True), 0)
    table.accept(job(4, end=True), 0)
    assert old.ending and not old.finished
    new = table.accept(job(4, start=True), 0)
    assert new is not old and (new.instance, new.slot) == (0, 1)
    assert table.accept(job(4), 0) is new
    old.pending.clear()
    assert old.finished
    table.release(old)
    assert table.accept(job(4, end=True), 0) is new
    assert table.sequences() == [new]


def test_string_and_integer_ids() -> None:
    table = SequenceTable("m", instances=1, capacity=4, idle_ns=0)
    a = table.accept(job("seq-a", start=True), 0)
    b = table.accept(job("seq-b", start=True), 0)
    assert a is not b
    assert table.accept(job("seq-a"), 1) is a
    with pytest.raises(InvalidArgument, match=START_FLAG):
        table.accept(job("seq-c"), 0)


def test_expire_idle_force_ends_sequences_as_triton_reaper_does() -> None:
    """Idle time counts from the last request accepted. An idle sequence with nothing
    queued frees its room at once; one with requests queued or running is force-ended
    (no request joins it) and frees its room once they ran; a backlogged one waits."""
    table = SequenceTable("m", instances=1, capacity=2, idle_ns=100)
    queued = table.accept(job(1, start=True), 0)  # a request still queued
    quiet = table.accept(job(2, start=True), 50)
    quiet.pending.clear()
    waiting = table.accept(job(3, start=True), 0)  # backlog
    assert table.next_deadline() == 100
    assert table.expire_idle(99) == []
    assert table.expire_idle(100) == [queued]
    assert queued.ending and queued.instance == 0 and not queued.finished
    with pytest.raises(InvalidArgument, match=START_FLAG):
        table.accept(job(1), 120)
    assert table.next_deadline() == 150
    assert table.expire_idle(150) == [quiet]
    assert waiting.instance == 0 and waiting.slot == 1  # the idle room went to the backlog
    assert table.next_deadline() == 100  # the promoted one's last request was at 0
    queued.pending.clear()
    assert queued.finished
    table.release(queued)
    assert {s.cid for s in table.sequences()} == {3}


def test_expire_idle_disabled_with_zero_timeout() -> None:
    table = SequenceTable("m", instances=1, capacity=1, idle_ns=0)
    sequence = table.accept(job(1, start=True), 0)
    sequence.pending.clear()
    assert table.expire_idle(10**18) == []
    assert table.next_deadline() is None


def test_backlogged_sequence_expires_with_its_requests_timeout() -> None:
    """Triton's backlog reaper: the earliest of now + timeout over the requests queued in
    the backlog; once it passes, the sequence is dropped and its ID routes nowhere."""
    table = SequenceTable("m", instances=1, capacity=1, idle_ns=0)
    table.accept(job(1, start=True), 0)
    late = job(2, start=True)
    late.timeout_us = 50
    waiting = table.accept(late, 10)
    assert waiting.expires_ns == 50_010 and table.next_deadline() == 50_010
    assert table.expire_backlog(50_009) == []
    assert table.expire_backlog(50_010) == [waiting]
    assert table.backlog_count() == 0 and len(table) == 1
    with pytest.raises(InvalidArgument, match=START_FLAG):
        table.accept(job(2), 60_000)


def test_accept_refreshes_last_activity_and_busy() -> None:
    table = SequenceTable("m", instances=1, capacity=1, idle_ns=100)
    sequence = table.accept(job(1, start=True), 10)
    assert table.busy()
    sequence.pending.clear()
    assert not table.busy()
    table.accept(job(1), 90)
    sequence.pending.clear()
    assert sequence.last_ns == 90
    assert table.expire_idle(150) == []
    assert table.expire_idle(190) == [sequence]


# ----------------------------------------------------------------------------- control specs


def batching(text: str) -> mc.ModelSequenceBatching:
    return text_format.Parse(text, mc.ModelSequenceBatching())


CONTROLS = """
control_input [
  { name: "START" control [ { kind: CONTROL_SEQUENCE_START fp32_false_true: [ 0, 1 ] } ] },
  { name: "END" control [ { kind: CONTROL_SEQUENCE_END int32_false_true: [ 10, 20 ] } ] },
  { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY bool_false_true: [ false, true ] } ] },
  { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 } ] }
]
"""


def test_control_specs_types_and_values() -> None:
    specs = {s.name: s for s in control_specs(batching(CONTROLS))}
    assert specs["START"].dtype == np.float32
    assert (specs["START"].false_value, specs["START"].true_value) == (0, 1)
    assert specs["END"].dtype == np.int32
    assert (specs["END"].false_value, specs["END"].true_value) == (10, 20)
    assert specs["READY"].dtype == np.bool_
    assert (specs["READY"].false_value, specs["READY"].true_value) == (False, True)
    assert specs["CORRID"].dtype == np.uint64


@pytest.mark.parametrize(
    ("config_type", "dtype"),
    [
        ("TYPE_UINT64", np.uint64),
        ("TYPE_INT64", np.int64),
        ("TYPE_UINT32", np.uint32),
        ("TYPE_INT32", np.int32),
        ("TYPE_STRING", np.object_),
    ],
)
def test_corrid_types(config_type: str, dtype: type) -> None:
    text = (
        'control_input [ { name: "C" control [ { kind: CONTROL_SEQUENCE_CORRID '
        f"data_type: {config_type} }} ] }} ]"
    )
    (spec,) = control_specs(batching(text))
    assert spec.dtype == np.dtype(dtype)


@pytest.mark.parametrize(
    "control",
    [
        "{ kind: CONTROL_SEQUENCE_START }",
        "{ kind: CONTROL_SEQUENCE_END fp32_false_true: [ 1 ] }",
        "{ kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1, 2 ] }",
        "{ kind: CONTROL_SEQUENCE_CORRID }",
    ],
)
def test_incomplete_controls_are_value_errors(control: str) -> None:
    with pytest.raises(ValueError, match="'X'"):
        control_specs(batching(f'control_input [ {{ name: "X" control [ {control} ] }} ]'))


# ----------------------------------------------------------------------------- control tensors


def test_control_tensors_per_slot_batched() -> None:
    """Rows are slots: a None row is an empty slot (zeros, READY false, CORRID 0). Each
    control takes the shape the model declares, [-1, 1] or [-1]."""
    controls = control_specs(batching(CONTROLS))
    rows = [job(7, start=True, value=3), None, job(9, end=True, value=4)]
    declared = {"START": [-1, 1], "END": [-1], "READY": [-1, 1], "CORRID": [-1]}
    inputs = build_sequence_inputs(rows, [None] * 3, controls, [], declared, batched=True)
    np.testing.assert_array_equal(inputs["INPUT"], [[3], [0], [4]])
    assert inputs["INPUT"].dtype == np.int32
    assert inputs["START"].dtype == np.float32
    np.testing.assert_array_equal(inputs["START"], [[1.0], [0.0], [0.0]])
    assert inputs["END"].shape == (3,) and inputs["END"].dtype == np.int32
    np.testing.assert_array_equal(inputs["END"], [10, 10, 20])
    assert inputs["READY"].dtype == np.bool_
    np.testing.assert_array_equal(inputs["READY"], [[True], [False], [True]])
    assert inputs["CORRID"].dtype == np.uint64
    np.testing.assert_array_equal(inputs["CORRID"], [7, 0, 9])


def test_undeclared_control_has_tritons_shape() -> None:
    """Triton adds each control as a [1] tensor per request: [batch, 1] batched, so that
    it broadcasts along the rows of a [batch, n] input (L0_dyna_sequence_batcher's
    TorchScript models add it to one); [1] without batching."""
    (spec,) = control_specs(
        batching(
            'control_input [ { name: "S" control [ '
            "{ kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] } ]"
        )
    )
    rows = [job(1, start=True), job(2)]
    inputs = build_sequence_inputs(rows, [None, None], [spec], [], {}, batched=True)
    np.testing.assert_array_equal(inputs["S"], [[1], [0]])
    inputs = build_sequence_inputs([job(1, start=True)], [None], [spec], [], {}, batched=False)
    np.testing.assert_array_equal(inputs["S"], [1])


def test_start_and_end_in_one_request() -> None:
    controls = control_specs(batching(CONTROLS))
    declared = {n: [-1, 1] for n in ("START", "END", "READY", "CORRID")}
    inputs = build_sequence_inputs(
        [job(5, start=True, end=True)], [None], controls, [], declared, batched=True
    )
    assert inputs["START"][0, 0] == 1.0 and inputs["END"][0, 0] == 20
    assert bool(inputs["READY"][0, 0])


def test_string_corrid_is_bytes_and_empty_for_dummy_rows() -> None:
    (spec,) = control_specs(
        batching(
            'control_input [ { name: "CORRID" control [ '
            "{ kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_STRING } ] } ]"
        )
    )
    rows = [job("abc", start=True), None, job(42)]
    inputs = build_sequence_inputs(rows, [None] * 3, [spec], [], {"CORRID": [-1, 1]}, True)
    corrid = inputs["CORRID"]
    assert corrid.dtype == np.object_ and corrid.shape == (3, 1)
    assert corrid[:, 0].tolist() == [b"abc", b"", b"42"]


def test_custom_false_true_values_and_dummy_rows() -> None:
    (spec,) = control_specs(
        batching(
            'control_input [ { name: "READY" control [ '
            "{ kind: CONTROL_SEQUENCE_READY fp32_false_true: [ -1, 2.5 ] } ] } ]"
        )
    )
    inputs = build_sequence_inputs(
        [None, job(1), None], [None] * 3, [spec], [], {"READY": [-1, 1]}, True
    )
    np.testing.assert_array_equal(inputs["READY"], [[-1.0], [2.5], [-1.0]])


def test_unbatched_model_controls() -> None:
    """max_batch_size 0: one row, shaped as declared ([1] or a scalar), inputs untouched."""
    controls = control_specs(batching(CONTROLS))
    row = Job(
        {"INPUT": np.array([5], dtype=np.int32)},
        ["OUTPUT"],
        0,
        correlation_id=3,
        sequence_start=True,
    )
    declared = {"START": [1], "END": [], "READY": [1, 1], "CORRID": [1]}
    inputs = build_sequence_inputs([row], [None], controls, [], declared, batched=False)
    assert inputs["INPUT"] is row.inputs["INPUT"]
    assert inputs["START"].shape == (1,) and inputs["START"][0] == 1.0
    assert inputs["END"].shape == () and int(inputs["END"]) == 10
    assert inputs["READY"].shape == (1, 1) and bool(inputs["READY"][0, 0])
    assert inputs["CORRID"].shape == (1,) and int(inputs["CORRID"][0]) == 3


# ----------------------------------------------------------------------------- state specs


def _state(extra: str = "", dims: str = "[ -1 ]", data_type: str = "TYPE_INT32") -> str:
    return (
        f'state [ {{ input_name: "IN_S" output_name: "OUT_S" data_type: {data_type} '
        f"dims: {dims} {extra} }} ]"
    )


def test_default_initial_state_is_zeros_with_variable_dims_as_one(tmp_path: Path) -> None:
    (spec,) = state_specs(batching(_state(dims="[ -1, 3 ]", data_type="TYPE_FP32")), tmp_path)
    assert (spec.input_name, spec.output_name) == ("IN_S", "OUT_S")
    assert spec.dtype == np.float32
    assert spec.initial.shape == (1, 3) and spec.initial.dtype == np.float32
    assert not spec.initial.any()


def test_zero_data_initial_state(tmp_path: Path) -> None:
    extra = 'initial_state: { data_type: TYPE_INT32 dims: [ 4 ] zero_data: true name: "z" }'
    (spec,) = state_specs(batching(_state(extra)), tmp_path)
    assert spec.initial.shape == (4,) and spec.initial.dtype == np.int32
    assert not spec.initial.any()


def test_initial_state_from_data_file(tmp_path: Path) -> None:
    (tmp_path / "initial_state").mkdir()
    values = np.array([[1, 2, 3], [4, 5, 6]], dtype=np.int32)
    (tmp_path / "initial_state" / "init.bin").write_bytes(values.tobytes())
    extra = 'initial_state: { data_type: TYPE_INT32 dims: [ 2, 3 ] data_file: "init.bin" }'
    (spec,) = state_specs(batching(_state(extra, dims="[ -1, -1 ]")), tmp_path)
    np.testing.assert_array_equal(spec.initial, values)
    assert spec.initial.flags.writeable  # a copy, not a view of the file bytes


def test_initial_state_file_of_the_wrong_size(tmp_path: Path) -> None:
    (tmp_path / "initial_state").mkdir()
    (tmp_path / "initial_state" / "init.bin").write_bytes(b"\0" * 12)
    extra = 'initial_state: { data_type: TYPE_INT32 dims: [ 2 ] data_file: "init.bin" }'
    with pytest.raises(ValueError, match="12 bytes, expected 8"):
        state_specs(batching(_state(extra)), tmp_path)


def test_missing_initial_state_file(tmp_path: Path) -> None:
    extra = 'initial_state: { data_type: TYPE_INT32 dims: [ 1 ] data_file: "nope.bin" }'
    with pytest.raises(ValueError, match="IN_S"):
        state_specs(batching(_state(extra)), tmp_path)


# ----------------------------------------------------------------------------- state tensors


def test_state_rows_initial_for_new_sequences_and_carried_otherwise(tmp_path: Path) -> None:
    extra = 'initial_state: { data_type: TYPE_INT32 dims: [ 1 ] zero_data: true name: "z" }'
    specs = state_specs(batching(_state(extra, dims="[ 1 ]")), tmp_path)
    rows = [job(1, start=True), job(2), job(3)]
    states = [None, [np.array([41], dtype=np.int32)], [np.array([-3], dtype=np.int32)]]
    inputs = build_sequence_inputs(rows, states, [], specs, {}, batched=True)
    np.testing.assert_array_equal(inputs["IN_S"], [[0], [41], [-3]])
    assert inputs["IN_S"].dtype == np.int32


def test_state_for_unbatched_model(tmp_path: Path) -> None:
    specs = state_specs(batching(_state(dims="[ 2 ]")), tmp_path)
    row = Job({"INPUT": np.array([5], dtype=np.int32)}, ["OUTPUT"], 0, correlation_id=1)
    carried = np.array([7, 8], dtype=np.int32)
    inputs = build_sequence_inputs([row], [[carried]], [], specs, {}, batched=False)
    np.testing.assert_array_equal(inputs["IN_S"], [7, 8])
    start = build_sequence_inputs([row], [None], [], specs, {}, batched=False)
    np.testing.assert_array_equal(start["IN_S"], [0, 0])


def test_empty_slot_beside_a_grown_variable_state(tmp_path: Path) -> None:
    """State dims [-1]: a sequence's state may grow past the initial shape [1]. An empty
    slot (Direct) in the same execution needs a dummy state of the batch's shape; a dummy
    row of the initial shape cannot be stacked with it."""
    specs = state_specs(batching(_state(dims="[ -1 ]")), tmp_path)
    rows = [None, job(2, value=6)]
    states = [None, [np.array([0, 5], dtype=np.int32)]]
    inputs = build_sequence_inputs(rows, states, [], specs, {}, batched=True)
    assert inputs["IN_S"].shape == (2, 2)
    np.testing.assert_array_equal(inputs["IN_S"][1], [0, 5])
    np.testing.assert_array_equal(inputs["IN_S"][0], [0, 0])


# ----------------------------------------------------------------------------- the driver


class Accumulator:
    """A fake stateful instance: OUTPUT_STATE = INPUT (+ INPUT_STATE unless START), and it
    records every execution's inputs."""

    def __init__(self, name: str, log: list[dict[str, Any]]) -> None:
        self.spec = InstanceSpec(name=name, kind="KIND_CPU", device_id=0, threads=1)
        self.log = log
        self._lock = threading.Lock()

    def execute(self, inputs: Mapping[str, Any], outputs: Sequence[str]) -> dict[str, Any]:
        with self._lock:
            self.log.append(
                {"instance": self.spec.name, **{k: v.copy() for k, v in inputs.items()}}
            )
        total = np.where(
            inputs["START"].astype(bool), inputs["INPUT"], inputs["INPUT"] + inputs["INPUT_STATE"]
        )
        return {"OUTPUT": total, "OUTPUT_STATE": total}

    def signature(self) -> ModelSignature:
        return ModelSignature(inputs=[], outputs=[])

    def close(self) -> None:
        pass


def make_scheduler(
    extra: str = "",
    max_batch_size: int = 2,
    instances: int = 1,
    corrid: str = "TYPE_UINT64",
    kind: type[Accumulator] = Accumulator,
) -> tuple[SequenceBatchScheduler, list[dict[str, Any]], ModelStats]:
    config = text_format.Parse(
        f'name: "acc" max_batch_size: {max_batch_size} sequence_batching {{ {extra} '
        'control_input [ { name: "START" control [ '
        "{ kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] }, "
        '{ name: "READY" control [ { kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ] } ] },'
        ' { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID '
        f"data_type: {corrid} }} ] }} ] "
        'state [ { input_name: "INPUT_STATE" output_name: "OUTPUT_STATE" '
        "data_type: TYPE_INT32 dims: [ 1 ] } ] }",
        mc.ModelConfig(),
    )
    log: list[dict[str, Any]] = []
    pool = InstancePool([InstanceWorker(kind(f"acc_{i}", log)) for i in range(instances)])
    stats = ModelStats()
    declared = {"START": [-1, 1], "READY": [-1, 1], "CORRID": [-1, 1], "INPUT_STATE": [-1, 1]}
    return SequenceBatchScheduler(config, pool, stats, declared, Path(".")), log, stats


@pytest.fixture(autouse=True)
def no_test_hooks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRITONSERVER_DELAY_SCHEDULER", raising=False)
    monkeypatch.delenv("TRITONSERVER_BACKLOG_DELAY_SCHEDULER", raising=False)


async def _value(scheduler: SequenceBatchScheduler, request: Job) -> int:
    return int((await scheduler.submit(request)).outputs["OUTPUT"][0, 0])


async def test_driver_sums_interleaved_sequences_with_backlog() -> None:
    scheduler, log, stats = make_scheduler(instances=2)
    try:

        async def run(cid: int, values: list[int]) -> list[int]:
            out = []
            for i, v in enumerate(values):
                request = job(cid, start=i == 0, end=i == len(values) - 1, value=v)
                out.append(await _value(scheduler, request))
            return out

        rng = np.random.default_rng(3)
        values = {cid: [int(v) for v in rng.integers(-9, 9, 6)] for cid in range(1, 8)}
        got = await asyncio.gather(*(run(cid, vals) for cid, vals in values.items()))
    finally:
        await scheduler.stop()
    for (cid, vals), out in zip(values.items(), got, strict=True):
        assert out == np.cumsum(vals).tolist(), cid
    assert executed_rows(stats) == 42
    for execution in log:  # READY marks exactly the rows with a request (CORRID != 0)
        np.testing.assert_array_equal(
            execution["READY"][:, 0], (execution["CORRID"][:, 0] != 0).astype(np.int32)
        )


async def test_driver_direct_empty_slot_is_a_zero_row() -> None:
    scheduler, log, _ = make_scheduler()
    try:
        await scheduler.submit(job(1, start=True, value=1))  # slot 0
        await scheduler.submit(job(2, start=True, value=2))  # slot 1
        await scheduler.submit(job(1, end=True, value=1))  # slot 0 frees
        assert await _value(scheduler, job(2, value=5)) == 7
    finally:
        await scheduler.stop()
    last = log[-1]
    np.testing.assert_array_equal(last["READY"], [[0], [1]])
    np.testing.assert_array_equal(last["CORRID"], [[0], [2]])
    np.testing.assert_array_equal(last["INPUT"], [[0], [5]])
    np.testing.assert_array_equal(last["START"], [[0], [0]])


async def test_driver_continuing_and_starting_sequences_share_an_execution() -> None:
    """The spec's Direct example: slot 0 holds a continuing sequence, slot 1 a new one; both
    requests are there, so one batch-size 2 execution runs with START [0, 1], READY [1, 1].
    With implicit state the new sequence's (initial) state has the same shape [1] as the
    continuing one's, so nothing keeps them apart."""
    scheduler, log, _ = make_scheduler()
    try:
        assert await _value(scheduler, job(1, start=True, value=4)) == 4
        both = [
            asyncio.create_task(_value(scheduler, job(1, value=5))),
            asyncio.create_task(_value(scheduler, job(2, start=True, value=7))),
        ]
        assert await asyncio.gather(*both) == [9, 7]
    finally:
        await scheduler.stop()
    assert len(log) == 2, [e["CORRID"][:, 0].tolist() for e in log]
    np.testing.assert_array_equal(log[1]["CORRID"], [[1], [2]])
    np.testing.assert_array_equal(log[1]["START"], [[0], [1]])
    np.testing.assert_array_equal(log[1]["READY"], [[1], [1]])
    np.testing.assert_array_equal(log[1]["INPUT_STATE"], [[4], [0]])


async def test_driver_start_on_a_live_sequence_restarts_it() -> None:
    """No END, then START again with the same ID: the queued request of the old sequence
    runs with its state, the new START begins from the initial state (Triton)."""
    scheduler, log, _ = make_scheduler()
    try:
        assert await _value(scheduler, job(3, start=True, value=4)) == 4
        old = asyncio.create_task(_value(scheduler, job(3, value=5)))
        new = asyncio.create_task(_value(scheduler, job(3, start=True, value=7)))
        assert await asyncio.gather(old, new) == [9, 7]
        assert await _value(scheduler, job(3, end=True, value=1)) == 8
    finally:
        await scheduler.stop()
    assert [e["INPUT_STATE"][0, 0] for e in log] == [0, 4, 0, 7]
    assert [e["CORRID"][0, 0] for e in log] == [3, 3, 3, 3]  # one slot throughout


async def test_driver_oldest_never_batches_two_requests_of_one_sequence() -> None:
    scheduler, log, _ = make_scheduler("oldest { max_candidate_sequences: 4 }", max_batch_size=4)
    try:
        requests = [
            job(1, start=True, value=1),
            job(1, value=2),
            job(1, value=3, end=True),
            job(2, start=True, value=10, end=True),
        ]
        tasks = [asyncio.create_task(_value(scheduler, r)) for r in requests]
        results = await asyncio.gather(*tasks)
    finally:
        await scheduler.stop()
    assert results == [1, 3, 6, 10]
    batches = [sorted(e["CORRID"][:, 0].tolist()) for e in log]
    assert batches == [[1, 2], [1], [1]]


async def test_driver_refuses_bad_requests() -> None:
    """Triton's texts, and its order: batch size before correlation ID before flags."""
    scheduler, _, _ = make_scheduler()
    no_id = "inference request to model 'acc' must specify a non-zero or non-empty correlation ID"
    try:
        for cid in (None, 0, ""):
            with pytest.raises(InvalidArgument) as info:
                await scheduler.submit(job(cid, start=True))
            assert str(info.value) == no_id
        batch_text = (
            "inference request to model 'acc' must specify batch-size 1 due to requirements "
            "of sequence batcher"
        )
        for cid in (None, 5):
            with pytest.raises(InvalidArgument) as info:
                await scheduler.submit(job(cid, start=True, rows=2))
            assert str(info.value) == batch_text
        with pytest.raises(InvalidArgument, match=START_FLAG):
            await scheduler.submit(job(5))  # the refused batch-2 START registered nothing
        assert scheduler.inflight == 0
    finally:
        await scheduler.stop()


async def test_driver_refuses_string_id_for_integer_corrid() -> None:
    """CORRID is UINT64: a string id cannot be fed to the model. It must be refused when
    submitted (INVALID_ARGUMENT), not fail inside the execution with a numpy error."""
    scheduler, _, _ = make_scheduler()
    try:
        with pytest.raises(InvalidArgument):
            await scheduler.submit(job("abc", start=True, end=True))
    finally:
        await scheduler.stop()


async def test_driver_releases_idle_sequences() -> None:
    scheduler, _, _ = make_scheduler("max_sequence_idle_microseconds: 50000", max_batch_size=1)
    try:
        assert await _value(scheduler, job(1, start=True, value=4)) == 4
        # One slot: sequence 2 waits until sequence 1 idles out (no END ever comes).
        assert await asyncio.wait_for(_value(scheduler, job(2, start=True, value=3)), 5) == 3
        await asyncio.sleep(0.15)
        with pytest.raises(InvalidArgument, match=START_FLAG):
            await scheduler.submit(job(1, value=1))
        assert await _value(scheduler, job(1, start=True, value=8)) == 8
    finally:
        await scheduler.stop()


async def test_driver_rejects_a_backlogged_sequence_whose_timeout_passed() -> None:
    scheduler, _, _ = make_scheduler(max_batch_size=1)
    try:
        assert await _value(scheduler, job(1, start=True, value=4)) == 4  # holds the slot
        late = job(2, start=True, value=3)
        late.timeout_us = 20_000
        with pytest.raises(Unavailable) as info:
            await asyncio.wait_for(scheduler.submit(late), 5)
        assert str(info.value) == "timeout of the corresponding sequence has been expired"
        assert await _value(scheduler, job(1, value=1, end=True)) == 5  # slot 0 served on
    finally:
        await scheduler.stop()


class _GatedAccumulator(Accumulator):
    """Holds each execution until ``gate`` is set; ``started`` says one began."""

    def __init__(self, name: str, log: list[dict[str, Any]]) -> None:
        super().__init__(name, log)
        self.gate = threading.Event()
        self.started = threading.Event()

    def execute(self, inputs: Mapping[str, Any], outputs: Sequence[str]) -> dict[str, Any]:
        self.started.set()
        self.gate.wait(10)
        return super().execute(inputs, outputs)


async def test_driver_counts_a_request_whose_caller_left_during_execution() -> None:
    """It reached the backend: a success when the backend finishes, and a cancellation."""
    scheduler, log, stats = make_scheduler()
    gated = _GatedAccumulator("acc_0", log)
    scheduler._pool.workers[0].instance = gated
    try:
        caller = asyncio.create_task(scheduler.submit(job(1, start=True, end=True, value=3)))
        await asyncio.to_thread(gated.started.wait, 5)
        caller.cancel()
        await asyncio.gather(caller, return_exceptions=True)
        assert (stats.success.count, stats.cancelled) == (0, 0)  # still executing
        gated.gate.set()
    finally:
        await scheduler.stop()
    assert (stats.success.count, stats.fail.count, stats.cancelled) == (1, 0, 1)
    assert stats.execution_count == 1


async def _cancel_one_queued(
    scheduler: SequenceBatchScheduler, cid: int, start: bool
) -> tuple[asyncio.Task[Any], asyncio.Task[Any]]:
    """Queue two requests of sequence ``cid`` (the first with START when ``start``), then
    cancel the first; the second is returned to be awaited."""
    first = asyncio.create_task(scheduler.submit(job(cid, start=start, value=1)))
    second = asyncio.create_task(scheduler.submit(job(cid, value=2)))
    await asyncio.sleep(0.05)
    assert not first.done() and not second.done()  # both queued
    first.cancel()
    await asyncio.gather(first, return_exceptions=True)
    return first, second


@pytest.mark.parametrize("strategy", ["direct { }", "oldest { max_candidate_sequences: 1 }"])
async def test_cancelling_a_queued_request_cancels_its_sequence(strategy: str) -> None:
    """Triton's scheduler_test (Direct, Oldest): the sequence's other queued request is
    answered CANCELLED, both count as CANCELED failures (the caller of the answered one
    counts its own), the request that runs finishes, and the sequence is over."""
    scheduler, log, stats = make_scheduler(strategy, max_batch_size=1)
    gated = _GatedAccumulator("acc_0", log)
    scheduler._pool.workers[0].instance = gated
    try:
        running = asyncio.create_task(_value(scheduler, job(1, start=True, value=4)))
        await asyncio.to_thread(gated.started.wait, 5)
        _, second = await _cancel_one_queued(scheduler, 1, start=False)
        with pytest.raises(Cancelled) as info:
            await asyncio.wait_for(second, 5)
        assert (info.value.failure, info.value.message) == ("CANCELED", "")  # Triton's
        assert (stats.failures["CANCELED"], stats.cancelled) == (1, 1)
        gated.gate.set()
        assert await asyncio.wait_for(running, 5) == 4
        with pytest.raises(InvalidArgument, match=START_FLAG):
            await scheduler.submit(job(1, value=1))
        # Its slot is free again: a new sequence runs.
        assert await asyncio.wait_for(_value(scheduler, job(2, start=True, end=True)), 5) == 0
    finally:
        gated.gate.set()
        await scheduler.stop()
    assert stats.execution_count == 2


async def test_cancelling_a_backlogged_request_cancels_its_sequence() -> None:
    """Triton's scheduler_test (backlog): a sequence waiting for a slot is dropped with
    every request of it, and the backlog moves on."""
    scheduler, _, stats = make_scheduler(max_batch_size=1)
    try:
        assert await _value(scheduler, job(1, start=True, value=4)) == 4  # holds the slot
        _, second = await _cancel_one_queued(scheduler, 2, start=True)
        with pytest.raises(Cancelled):
            await asyncio.wait_for(second, 5)
        assert (stats.failures["CANCELED"], stats.cancelled) == (1, 1)
        waiting = asyncio.create_task(_value(scheduler, job(3, start=True, end=True, value=7)))
        assert await _value(scheduler, job(1, value=1, end=True)) == 5
        assert await asyncio.wait_for(waiting, 5) == 7
        with pytest.raises(InvalidArgument, match=START_FLAG):
            await scheduler.submit(job(2, value=1))
    finally:
        await scheduler.stop()


class _RemoteAccumulator(Accumulator):
    """As an instance in a worker process answers: its outputs carry the run's own start
    and end, here 1 ms and 3 ms after the call began."""

    def execute(self, inputs: Mapping[str, Any], outputs: Sequence[str]) -> dict[str, Any]:
        called = time.monotonic_ns()
        time.sleep(0.005)
        return TimedOutputs(
            super().execute(inputs, outputs), called + 1_000_000, called + 3_000_000
        )


async def test_an_instance_in_a_worker_times_the_compute_with_its_run() -> None:
    """compute_infer is the worker's run (2 ms each here), not the round trip (≥ 5 ms);
    the rest of the round trip counts as compute_input and compute_output."""
    scheduler, _, stats = make_scheduler(kind=_RemoteAccumulator)
    try:
        assert await _value(scheduler, job(1, start=True, value=4)) == 4
        assert await _value(scheduler, job(1, end=True, value=5)) == 9
    finally:
        await scheduler.stop()
    (batch,) = stats.batches.values()
    assert batch.compute_infer.count == 2 and batch.compute_infer.ns == 4_000_000
    assert batch.compute_input.ns + batch.compute_output.ns >= 2 * 3_000_000
