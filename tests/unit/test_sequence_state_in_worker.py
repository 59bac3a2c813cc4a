"""Sequence implicit state held in the instance's worker process (issue 25): the sequence
batcher over real ONNX Runtime instances in workers, against the same instances in
threads (state in the engine), on the generated accumulator and history models."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from executed import executed_rows
from google.protobuf import text_format
from models import write_model
from onnx import ModelProto
from sequence_models import (
    accumulator_config,
    accumulator_model,
    history_config,
    history_model,
)
from test_isolated_instance import _kill_worker

from inference import model_config_pb2 as mc
from service.backends.base import HeldRows, InstanceSpec, SequenceRows
from service.backends.isolated import IsolatedInstance
from service.backends.onnxruntime import OnnxRuntimeBackend
from service.errors import Internal
from service.scheduling.base import Job
from service.scheduling.instances import InstancePool, InstanceWorker
from service.scheduling.sequence.batcher import SequenceBatchScheduler
from service.scheduling.sequence.held import HeldStates
from service.statistics import ModelStats
from wire.datatypes import Array


class _Recording(IsolatedInstance):
    """A real instance in a worker that notes what crossed for each stateful batch."""

    def __init__(self, config: mc.ModelConfig, version: Path, spec: InstanceSpec) -> None:
        super().__init__("onnxruntime", config, version, spec)
        self.sent: list[tuple[list[str], list[str], SequenceRows, list[str], HeldRows]] = []

    def execute_holding_state(
        self, inputs: Mapping[str, Array], outputs: Sequence[str], rows: SequenceRows
    ) -> tuple[dict[str, Array], HeldRows]:
        results, held = super().execute_holding_state(inputs, outputs, rows)
        self.sent.append((sorted(inputs), list(outputs), rows, sorted(results), held))
        return results, held


@dataclass
class Served:
    scheduler: SequenceBatchScheduler
    stats: ModelStats
    instances: list[_Recording]

    async def value(self, cid: int, value: int, start: bool = False, end: bool = False) -> int:
        """The first element of OUTPUT for one request of sequence ``cid``."""
        job = Job(
            {"INPUT": np.full((1, 1), value, np.int32)},
            ["OUTPUT"],
            1,
            correlation_id=cid,
            sequence_start=start,
            sequence_end=end,
        )
        return int((await self.scheduler.submit(job)).outputs["OUTPUT"][0, -1])


@pytest.fixture
async def serve(tmp_path: Path) -> AsyncIterator[Callable[..., Served]]:
    """``serve(model, config_text, in_worker)``: a sequence batcher over the model's
    instances, in worker processes or (``in_worker=False``) in threads."""
    opened: list[Served] = []

    def make(model: ModelProto, config_text: str, in_worker: bool) -> Served:
        config = text_format.Parse(config_text, mc.ModelConfig())
        config.backend, config.default_model_filename = "onnxruntime", "model.onnx"
        repo = tmp_path / f"{config.name}_{len(opened)}"
        model_dir = write_model(repo, config.name, model, config_text)
        version = model_dir / "1"
        count = config.instance_group[0].count
        specs = [InstanceSpec(f"{config.name}_0_{i}", "KIND_CPU", 0, 1) for i in range(count)]
        instances = [
            _Recording(config, version, spec)
            if in_worker
            else OnnxRuntimeBackend().open(config, version, spec)
            for spec in specs
        ]
        signature = instances[0].signature()
        declared = {t.name: t.shape for t in (*signature.inputs, *signature.outputs)}
        pool = InstancePool([InstanceWorker(instance) for instance in instances])
        stats = ModelStats()
        scheduler = SequenceBatchScheduler(config, pool, stats, declared, model_dir)
        served = Served(scheduler, stats, [i for i in instances if isinstance(i, _Recording)])
        opened.append(served)
        return served

    yield make
    for served in opened:
        await served.scheduler.stop()


async def _run_sequences(served: Served, values: dict[int, list[int]]) -> dict[int, list[int]]:
    """Every sequence's requests in order, the sequences concurrently."""

    async def one(cid: int, steps: list[int]) -> list[int]:
        last = len(steps) - 1
        return [
            await served.value(cid, v, start=i == 0, end=i == last) for i, v in enumerate(steps)
        ]

    results = await asyncio.gather(*(one(cid, steps) for cid, steps in values.items()))
    return dict(zip(values, results, strict=True))


def _values(seed: int, sequences: int, steps: int) -> dict[int, list[int]]:
    rng = np.random.default_rng(seed)
    return {cid: [int(v) for v in rng.integers(-9, 9, steps)] for cid in range(1, sequences + 1)}


@pytest.mark.parametrize("strategy", ["direct { }", "oldest { max_candidate_sequences: 3 }"])
async def test_state_carried_through_the_worker_as_in_threads(
    serve: Callable[..., Served], strategy: str
) -> None:
    """Seven sequences over two instances of two slots (Direct: a backlog, and empty
    slots when a sequence ends first; Oldest: batches of candidates): the running sums
    are those of threads mode, and no state tensor crosses between engine and worker."""
    config = accumulator_config("acc", reset_on_start=False, strategy=strategy)
    values = _values(3, 7, 6)
    model = accumulator_model(reset_on_start=False)
    threads = await _run_sequences(serve(model, config, False), values)
    served = serve(model, config, True)
    workers = await _run_sequences(served, values)
    assert workers == threads == {cid: np.cumsum(v).tolist() for cid, v in values.items()}
    sent = [entry for instance in served.instances for entry in instance.sent]
    assert sum(len([k for k in rows.keys if k is not None]) for _, _, rows, _, _ in sent) == 42
    for inputs, outputs, _, results, _ in sent:
        assert "INPUT_STATE" not in inputs and outputs == results == ["OUTPUT"]
    stats = served.stats  # the worker's run is the compute, as for any batch there
    assert executed_rows(stats) == 42
    assert sum(b.compute_infer.count for b in stats.batches.values()) == stats.execution_count
    assert all(b.compute_infer.ns > 0 for b in stats.batches.values())


async def test_a_growing_state_groups_rows_by_the_shapes_the_worker_reports(
    serve: Callable[..., Served],
) -> None:
    """The history model's state grows a column per request: only the worker has the
    bytes, yet rows of different lengths never share an execution (they could not be
    concatenated), as in threads mode."""
    values = {1: [1, 2, 3, 4], 2: [7, 8], 3: [5, 6, 7]}
    threads = await _run_sequences(serve(history_model(), history_config("h"), False), values)
    served = serve(history_model(), history_config("h"), True)
    assert await _run_sequences(served, values) == threads
    assert threads == {cid: list(steps) for cid, steps in values.items()}  # the last column
    for *_, held in served.instances[0].sent:
        shapes = {s for s in held.shapes if s is not None}
        assert len(shapes) == 1, shapes  # the rows of one execution agree in state shape


async def test_direct_empty_slot_beside_a_continuing_sequence(
    serve: Callable[..., Served],
) -> None:
    served = serve(accumulator_model(), accumulator_config("acc", instance_count=1), True)
    assert await served.value(1, 1, start=True) == 1  # slot 0
    assert await served.value(2, 2, start=True) == 2  # slot 1
    assert await served.value(1, 1, end=True) == 2  # slot 0 frees
    assert await served.value(2, 5) == 7
    *_, (_, _, rows, _, held) = served.instances[0].sent
    first = served.instances[0].sent[0][2].keys[0]
    assert rows.keys[0] is None and rows.keys[1] is not None and rows.keys[1] != first
    assert rows.forget == (first,)  # sequence 1's state is dropped with the next batch
    assert held.shapes[0] is None and held.shapes[1] == ((1,),)
    assert held.held == 1


async def test_a_start_resets_a_live_sequence_in_the_worker(serve: Callable[..., Served]) -> None:
    """No END, then START again with the same ID: the old sequence's queued request runs
    on its state, the START from the initial state. The model has no START control, so
    only the worker's reset can make the sum start over."""
    config = accumulator_config("acc", reset_on_start=False, instance_count=1)
    served = serve(accumulator_model(reset_on_start=False), config, True)
    assert await served.value(3, 4, start=True) == 4
    old = asyncio.create_task(served.value(3, 5))
    new = asyncio.create_task(served.value(3, 7, start=True))
    assert list(await asyncio.gather(old, new)) == [9, 7]
    assert await served.value(3, 1, end=True) == 8
    fresh = [rows.fresh[0] for _, _, rows, _, _ in served.instances[0].sent]
    assert fresh == [True, False, True, False]


async def test_released_sequences_are_forgotten_in_the_worker(
    serve: Callable[..., Served],
) -> None:
    """1,000 sequences of two steps, four at a time on one instance of two slots: the
    worker holds the live ones' state and those released since its last batch, never
    more."""
    served = serve(accumulator_model(), accumulator_config("acc", instance_count=1), True)

    async def sequence(cid: int) -> None:
        assert await served.value(cid, cid, start=True) == cid
        assert await served.value(cid, 1, end=True) == cid + 1

    for first in range(1, 1001, 4):
        await asyncio.gather(*(sequence(cid) for cid in range(first, first + 4)))
    (instance,) = served.instances
    # Two rooms, and up to two sequences released after the batch in flight was sent.
    most = max(held.held for *_, held in instance.sent)
    assert most <= 4, most
    assert len(instance.sent) >= 1000


async def test_a_killed_worker_loses_its_states_and_says_so(
    serve: Callable[..., Served],
) -> None:
    """After the worker dies between steps, sequence 1's next requests fail with an
    error naming the model and the sequence (never a silent restart from zero), while a
    sequence starting in the same batch runs; a START of sequence 1 then works."""
    served = serve(accumulator_model(), accumulator_config("acc", instance_count=1), True)
    (instance,) = served.instances
    assert await served.value(1, 4, start=True) == 4
    assert await served.value(1, 5) == 9
    _kill_worker(instance)
    lost, started = await asyncio.gather(
        served.value(1, 1), served.value(2, 6, start=True), return_exceptions=True
    )
    assert started == 6
    assert isinstance(lost, Internal)
    assert str(lost) == (
        "inference request for sequence 1 to model 'acc' cannot continue it: its implicit "
        "state was lost when the worker process of instance 'acc_0_0' ended; start the "
        "sequence again with the START flag"
    )
    assert len(instance.sent[-1][2].keys) == 2  # one execution: only its row failed
    with pytest.raises(Internal, match=r"sequence 1 to model 'acc'.*state was lost"):
        await served.value(1, 2)  # still lost, not restarted from the initial state
    assert await served.value(1, 3, start=True) == 3
    assert await served.value(1, 2, end=True) == 5
    assert await served.value(2, 1, end=True) == 7
    assert instance.restarts == 1


def test_held_states_forget_lose_and_restart_without_a_worker(tmp_path: Path) -> None:
    """HeldStates alone: a fresh row starts from the initial state, a continuing row
    whose state is not there is lost (and filled like an empty slot), forgotten keys go."""
    config_text = accumulator_config("acc")
    config = text_format.Parse(config_text, mc.ModelConfig())
    held = HeldStates(config, tmp_path)
    inputs, lost = held.inputs(SequenceRows((1, None, 2), (True, True, False), ()))
    assert lost == (2,)
    np.testing.assert_array_equal(inputs["INPUT_STATE"], [[0], [0], [0]])
    results = {"OUTPUT_STATE": np.array([[4], [0], [9]], np.int32)}
    report = held.keep(results, SequenceRows((1, None, 2), (True, True, False), ()), lost)
    assert report == HeldRows((((1,),), None, None), (2,), 1)
    inputs, lost = held.inputs(SequenceRows((1,), (False,), ()))
    assert lost == () and inputs["INPUT_STATE"].tolist() == [[4]]
    assert held.run_outputs(["OUTPUT"]) == ["OUTPUT", "OUTPUT_STATE"]
    held.inputs(SequenceRows((3,), (True,), (1, 7)))
    assert len(held) == 0
