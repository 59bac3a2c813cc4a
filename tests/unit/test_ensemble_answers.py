"""Every request to an ensemble gets an answer: its outputs, or an error that says why.

Issue 39: whatever its steps do (answer without tensors, answer nothing, fail, crash,
stream 0..N responses), the ensemble scheduler must not wait forever; and a step whose
mapped optional input was never produced runs with the tensors that exist, as Triton's
ensemble scheduler (r24.10) gives a placeholder for every output a step did not set.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator

import numpy as np
import pytest
from google.protobuf import text_format

from inference import model_config_pb2 as mc
from service.errors import Internal, ServerError
from service.scheduling.base import ExecutionResult, Job
from service.scheduling.ensemble import EnsembleScheduler
from service.scheduling.responses import Response, StreamSender
from service.statistics import ModelStats
from service.types import FINAL_FLAG, ExecutionRecord, InferRequest, InferResponse, OutputTensor

#: What a step model may do with a request (its name is the behaviour).
BEHAVIOURS = ("echo", "empty", "silent", "error", "crash", "stream0", "stream2")


def _response(model: str, arrays: dict[str, np.ndarray], final: bool | None) -> InferResponse:
    params = {} if final is None else {FINAL_FLAG: final}
    outputs = [OutputTensor(name, "INT32", a) for name, a in arrays.items()]
    return InferResponse(model, "1", "r", outputs, params)


class Runner:
    """Step models named by behaviour: ``echo`` answers OUT = IN for the inputs it got
    (none when it got none); ``empty`` answers once without tensors; ``silent`` answers
    nothing; ``error`` fails; ``crash`` raises what no model should (a defect);
    ``stream0``/``stream2`` are decoupled: 0 or 2 echoes, then a flags-only final."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[str, ...]]] = []

    async def stream_infer(
        self, request: InferRequest, record: ExecutionRecord | None = None
    ) -> AsyncIterator[InferResponse]:
        name = request.model_name
        self.calls.append((name, tuple(t.name for t in request.inputs)))
        echoed = {
            t.name.replace("IN", "OUT"): np.asarray(t.contents, dtype=np.int32)
            for t in request.inputs
        }
        await asyncio.sleep(0)
        if name == "echo":
            yield _response(name, echoed, None)
        elif name == "empty":
            yield _response(name, {}, None)
        elif name == "error":
            raise Internal("step failed")
        elif name == "crash":
            raise RuntimeError("model defect")
        elif name.startswith("stream"):
            for _ in range(int(name[-1])):
                yield _response(name, echoed, False)
            yield _response(name, {}, True)


def _config(first: str, second: str, decoupled: bool) -> mc.ModelConfig:
    """IN0 (optional) -> first -> MID -> second -> OUT0; IN1 (optional) -> second -> OUT1."""
    text = f"""
      name: "e" platform: "ensemble" max_batch_size: 0
      input [ {{ name: "IN0" data_type: TYPE_INT32 dims: [ -1 ] optional: true }},
              {{ name: "IN1" data_type: TYPE_INT32 dims: [ -1 ] optional: true }} ]
      output [ {{ name: "OUT0" data_type: TYPE_INT32 dims: [ -1 ] }},
               {{ name: "OUT1" data_type: TYPE_INT32 dims: [ -1 ] }} ]
      ensemble_scheduling {{ step [
        {{ model_name: "{first}" model_version: -1
           input_map {{ key: "IN0" value: "IN0" }} output_map {{ key: "OUT0" value: "MID" }} }},
        {{ model_name: "{second}" model_version: -1
           input_map {{ key: "IN0" value: "MID" }} input_map {{ key: "IN1" value: "IN1" }}
           output_map {{ key: "OUT0" value: "OUT0" }} output_map {{ key: "OUT1" value: "OUT1" }} }}
      ] }}"""
    config = text_format.Parse(text, mc.ModelConfig())
    config.model_transaction_policy.decoupled = decoupled
    return config


_TYPES = {name: "INT32" for name in ("IN0", "IN1", "MID", "OUT0", "OUT1")}


def _job(inputs: tuple[str, ...]) -> Job:
    return Job({n: np.array([7], dtype=np.int32) for n in inputs}, ["OUT0", "OUT1"], 0, "r")


async def _collect(sink: StreamSender) -> list[Response]:
    return [r async for r in sink.responses()]


@pytest.mark.parametrize("inputs", [("IN0", "IN1"), ("IN0",), ("IN1",), ()])
@pytest.mark.parametrize("decoupled", [False, True])
async def test_no_request_to_an_ensemble_is_left_without_an_answer(
    inputs: tuple[str, ...], decoupled: bool
) -> None:
    """Every pair of step behaviours, with and without each optional input: the request
    ends (outputs, or a ServerError naming the ensemble) in bounded time, and a decoupled
    one's stream ends with the final flag."""
    for first, second in itertools.product(BEHAVIOURS, repeat=2):
        scheduler = EnsembleScheduler(
            _config(first, second, decoupled), Runner(), ModelStats(), _TYPES
        )
        job = _job(inputs)
        sink = StreamSender(asyncio.get_running_loop()) if decoupled else None
        job.sink = sink
        case = f"{first} -> {second}, inputs {inputs}, decoupled {decoupled}"
        try:
            outcome: ExecutionResult | ServerError = await asyncio.wait_for(
                scheduler.submit(job), 5
            )
        except ServerError as exc:
            outcome = exc
        except TimeoutError:
            pytest.fail(f"request left without an answer: {case}")
        if isinstance(outcome, ServerError):
            assert outcome.message.startswith("in ensemble 'e', "), case
        elif sink is not None:
            try:  # the stream ends only with its final response
                responses = await asyncio.wait_for(_collect(sink), 5)
            except TimeoutError:
                pytest.fail(f"stream left without its final response: {case}")
            assert responses[-1].final, case


async def test_a_step_gets_only_the_optional_inputs_that_exist() -> None:
    """Triton's L0_optional_input connecting tensor: the first step sets no tensor, so the
    second runs with IN1 only, and the ensemble answers with what was produced."""
    runner = Runner()
    scheduler = EnsembleScheduler(_config("empty", "echo", False), runner, ModelStats(), _TYPES)
    result = await asyncio.wait_for(scheduler.submit(_job(("IN0", "IN1"))), 5)
    assert runner.calls == [("empty", ("IN0",)), ("echo", ("IN1",))]
    assert list(result.outputs) == ["OUT1"]
    assert result.outputs["OUT1"].tolist() == [7]


async def test_an_absent_optional_ensemble_input_is_not_awaited() -> None:
    """No IN0 in the request: the first step runs without inputs, the second with IN1."""
    runner = Runner()
    scheduler = EnsembleScheduler(_config("echo", "echo", False), runner, ModelStats(), _TYPES)
    result = await asyncio.wait_for(scheduler.submit(_job(("IN1",))), 5)
    assert runner.calls == [("echo", ()), ("echo", ("IN1",))]
    assert result.outputs["OUT1"].tolist() == [7]


async def test_a_crashing_step_fails_the_request_with_an_internal_error() -> None:
    scheduler = EnsembleScheduler(_config("crash", "echo", False), Runner(), ModelStats(), _TYPES)
    with pytest.raises(Internal) as info:
        await asyncio.wait_for(scheduler.submit(_job(("IN0", "IN1"))), 5)
    assert info.value.message == (
        "in ensemble 'e', step 'crash' failed: RuntimeError('model defect')"
    )
