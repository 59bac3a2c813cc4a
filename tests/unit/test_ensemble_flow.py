"""The ensemble scheduler's data flow (Triton's iterations), with a fake step runner:
decoupled steps answer 0..N times and everything downstream runs once per answer."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import numpy as np
import pytest
from google.protobuf import text_format

from inference import model_config_pb2 as mc
from service.errors import Internal, InvalidArgument
from service.repository.config_file import ConfigError
from service.repository.ensemble_config import validate_ensemble
from service.scheduling.base import Job
from service.scheduling.ensemble import EnsembleScheduler
from service.scheduling.responses import Response, StreamSender
from service.statistics import ModelStats
from service.types import FINAL_FLAG, ExecutionRecord, InferRequest, InferResponse, OutputTensor


class Runner:
    """``rep`` answers once per element of IN (decoupled); ``sq`` answers n n times
    (decoupled); ``inc`` answers IN + 1 once (not decoupled); ``bad`` fails."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    async def stream_infer(
        self, request: InferRequest, record: ExecutionRecord | None = None
    ) -> AsyncIterator[InferResponse]:
        self.calls.append(request.model_name)
        (tensor,) = request.inputs
        assert tensor.contents is not None
        values = [int(v) for v in tensor.contents]
        name = request.model_name
        if name == "bad":
            raise Internal("step exploded")
        if name == "inc":
            yield _response(name, "OUT", values[0] + 1, None)
            return
        outputs = values if name == "rep" else [values[0]] * values[0]
        for value in outputs:
            await asyncio.sleep(0)
            yield _response(name, "OUT", value, False)


def _response(model: str, output: str, value: int, final: bool | None) -> InferResponse:
    params = {} if final is None else {FINAL_FLAG: final}
    array = np.array([value], dtype=np.int32)
    return InferResponse(model, "1", "r", [OutputTensor(output, "INT32", array)], params)


def _step(model: str, source: str, target: str) -> str:
    return (
        f'{{ model_name: "{model}" model_version: -1 input_map {{ key: "IN" value: "{source}" }} '
        f'output_map {{ key: "OUT" value: "{target}" }} }}'
    )


def _config(
    steps: list[str], decoupled: bool, outputs: tuple[str, ...] = ("OUT",)
) -> mc.ModelConfig:
    text = (
        'name: "e" platform: "ensemble" max_batch_size: 0 '
        'input [ { name: "IN" data_type: TYPE_INT32 dims: [ -1 ] } ] '
        + " ".join(
            f'output [ {{ name: "{o}" data_type: TYPE_INT32 dims: [ 1 ] }} ]' for o in outputs
        )
        + f" ensemble_scheduling {{ step [ {', '.join(steps)} ] }}"
    )
    config = text_format.Parse(text, mc.ModelConfig())
    config.model_transaction_policy.decoupled = decoupled
    return config


async def _stream(config: mc.ModelConfig, values: list[int]) -> tuple[list[Response], Runner]:
    runner = Runner()
    types = {name: "INT32" for name in ("IN", "OUT", "MID", "SIDE")}
    scheduler = EnsembleScheduler(config, runner, ModelStats(), types)
    sink = StreamSender(asyncio.get_running_loop())
    job = Job({"IN": np.array(values, dtype=np.int32)}, ["OUT"], 0, "r")
    job.sink = sink
    await scheduler.submit(job)
    return [r async for r in sink.responses()], runner


async def test_every_response_of_a_decoupled_step_runs_the_next_step() -> None:
    config = _config([_step("rep", "IN", "MID"), _step("sq", "MID", "OUT")], decoupled=True)
    responses, runner = await _stream(config, [1, 2, 3])
    values = sorted(int(r.outputs["OUT"][0]) for r in responses if r.outputs)
    assert values == [1, 2, 2, 3, 3, 3]
    assert runner.calls.count("sq") == 3
    assert [r.final for r in responses] == [False] * 6 + [True]  # then a flags-only final
    assert not responses[-1].outputs


async def test_no_response_from_a_decoupled_step_ends_with_the_final_flag_only() -> None:
    config = _config([_step("rep", "IN", "MID"), _step("sq", "MID", "OUT")], decoupled=True)
    responses, runner = await _stream(config, [])
    assert [(r.outputs, r.final) for r in responses] == [({}, True)]
    assert runner.calls == ["rep"]


async def test_last_response_of_a_final_step_carries_the_final_flag() -> None:
    """A step that is not decoupled answers once, finally: the ensemble's last response is
    final itself, as Triton sends it (no extra flags-only response)."""
    config = _config([_step("rep", "IN", "MID"), _step("inc", "MID", "OUT")], decoupled=True)
    responses, _ = await _stream(config, [5])
    assert [(int(r.outputs["OUT"][0]), r.final) for r in responses] == [(6, True)]


async def test_steps_no_requested_output_needs_are_pruned() -> None:
    config = _config(
        [_step("inc", "IN", "OUT"), _step("rep", "IN", "SIDE")],
        decoupled=False,
        outputs=("OUT", "SIDE"),
    )
    runner = Runner()
    scheduler = EnsembleScheduler(
        config, runner, ModelStats(), {"IN": "INT32", "OUT": "INT32", "SIDE": "INT32"}
    )
    job = Job({"IN": np.array([1], dtype=np.int32)}, ["OUT"], 0, "r")
    result = await scheduler.submit(job)
    assert int(result.outputs["OUT"][0]) == 2
    assert runner.calls == ["inc"]


async def test_step_failure_names_the_ensemble_and_counts_as_other() -> None:
    config = _config([_step("bad", "IN", "OUT")], decoupled=False)
    stats = ModelStats()
    scheduler = EnsembleScheduler(config, Runner(), stats, {"IN": "INT32", "OUT": "INT32"})
    with pytest.raises(Internal) as info:
        await scheduler.submit(Job({"IN": np.array([1], dtype=np.int32)}, ["OUT"], 0, "r"))
    assert info.value.message == "in ensemble 'e', step exploded"
    assert info.value.failure == "OTHER"
    # Triton's request tracker counts it once (the core counts the error response).
    assert stats.failures["OTHER"] == 1 and stats.fail.count == 1


async def test_ensemble_that_is_not_decoupled_and_gets_no_output_reports_a_deadlock() -> None:
    config = _config([_step("rep", "IN", "OUT")], decoupled=False)
    scheduler = EnsembleScheduler(config, Runner(), ModelStats(), {"IN": "INT32", "OUT": "INT32"})
    with pytest.raises(InvalidArgument) as info:
        await scheduler.submit(Job({"IN": np.zeros(0, dtype=np.int32)}, ["OUT"], 0, ""))
    assert info.value.message == (
        "in ensemble 'e', [request id: <id_unknown>] unexpected deadlock, at least one output "
        "is not set while no more ensemble steps can be made"
    )


# --------------------------------------------------------------------------- load-time checks


def _composing(decoupled: bool) -> mc.ModelConfig:
    config = text_format.Parse(
        'max_batch_size: 0 input [ { name: "IN" data_type: TYPE_INT32 dims: [ -1 ] } ] '
        'output [ { name: "OUT" data_type: TYPE_INT32 dims: [ -1 ] } ]',
        mc.ModelConfig(),
    )
    config.model_transaction_policy.decoupled = decoupled
    return config


def test_an_ensemble_with_a_decoupled_step_is_decoupled() -> None:
    lookup = {"rep": _composing(True), "inc": _composing(False)}
    config = _config([_step("rep", "IN", "MID"), _step("inc", "MID", "OUT")], decoupled=False)
    config.output[0].dims[:] = [-1]
    validate_ensemble(config, lambda name, version: lookup[name])
    assert config.model_transaction_policy.decoupled
    plain = _config([_step("inc", "IN", "OUT")], decoupled=False)
    plain.output[0].dims[:] = [-1]
    validate_ensemble(plain, lambda name, version: lookup[name])
    assert not plain.model_transaction_policy.decoupled


def test_a_step_may_not_join_two_decoupled_flows() -> None:
    join = mc.ModelConfig()
    join.CopyFrom(_composing(False))
    join.input.add(name="IN2", data_type=mc.TYPE_INT32, dims=[-1])
    lookup = {"rep": _composing(True), "join": join}
    config = _config([_step("rep", "IN", "MID")], decoupled=False)
    config.output[0].dims[:] = [-1]
    step = config.ensemble_scheduling.step.add(model_name="join", model_version=-1)
    step.input_map["IN"] = "MID"
    step.input_map["IN2"] = "IN"  # straight from the request: another flow
    step.output_map["OUT"] = "OUT"
    with pytest.raises(ConfigError) as info:
        validate_ensemble(config, lambda name, version: lookup[name])
    assert str(info.value) == (
        "in ensemble e, step of model 'join' receives inputs originated from different "
        "decoupled models"
    )


async def test_responses_name_the_sequence_of_the_outputs_steps_made() -> None:
    """Triton 2.51's ensemble adds sequence_id (0 without one, a string for a string id),
    sequence_start and sequence_end to every response whose outputs a step made
    (ensemble_scheduler.cc, r24.10)."""
    config = _config([_step("rep", "IN", "MID"), _step("inc", "MID", "OUT")], decoupled=True)
    responses, _ = await _stream(config, [5])
    assert responses[0].parameters == {
        "sequence_id": 0,
        "sequence_start": False,
        "sequence_end": False,
    }
    plain = _config([_step("inc", "IN", "OUT")], decoupled=False)
    scheduler = EnsembleScheduler(plain, Runner(), ModelStats(), {"IN": "INT32", "OUT": "INT32"})
    for sequence, start, end in [(42, True, False), ("user-7", False, True)]:
        job = Job({"IN": np.array([1], np.int32)}, ["OUT"], 0, "r", correlation_id=sequence)
        job.sequence_start, job.sequence_end = start, end
        result = await scheduler.submit(job)
        assert result.parameters == {
            "sequence_id": sequence,
            "sequence_start": start,
            "sequence_end": end,
        }
