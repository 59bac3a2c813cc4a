"""The ensemble scheduler: runs the step DAG, each step as a request to its own model.

Triton's data flow (core ``ensemble_scheduler.cc``): every ensemble tensor holds numbered
*iterations*; each response of a step adds the next iteration of each of its output
tensors, and a step runs once for every iteration number that all its input tensors have.
A step whose model is decoupled may answer 0..N times, so everything downstream of it
runs 0..N times, and the ensemble (decoupled too, see ``ensemble_config``) streams one
response per iteration of its requested outputs. The last response carries the final
flag, or a flags-only final follows when the last step ends without output. Steps whose
outputs nobody asked for are pruned, as Triton prunes them.

A step starts as soon as its inputs exist, so independent steps run concurrently; each
composing model keeps its own scheduler (and batching). Steps go through a
``StepRunner``, the core's transport-neutral stream infer, so composing models are
validated, scheduled and counted exactly as if a client had called them.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from inference import model_config_pb2 as mc

from ..errors import Internal, InvalidArgument, ServerError, Unavailable, request_prefix
from ..repository.ensemble_config import StepShapes
from ..statistics import BatchTimings, ModelStats
from ..types import (
    FINAL_FLAG,
    ExecutionRecord,
    InferRequest,
    InferResponse,
    InputTensor,
    ParameterValue,
    RequestedOutput,
)
from .base import Array, ExecutionResult, Job
from .inflight import InFlight

__all__ = ["EnsembleScheduler", "StepRunner"]


class StepRunner(Protocol):
    def stream_infer(
        self, request: InferRequest, record: ExecutionRecord | None = None
    ) -> AsyncIterator[InferResponse]:
        """Every response of one step request: one, or 0..N from a decoupled model;
        ``record`` receives the execution's timings (traced steps)."""
        ...


Outputs = dict[str, Array]


@dataclass(slots=True)
class _Iteration:
    data: Array | None  # None: a step did not produce it (an optional downstream input)
    uses: int  # consumers still to read it (pruned when it reaches 0)


@dataclass(slots=True)
class _Tensor:
    consumers: int
    iterations: dict[int, _Iteration] = field(default_factory=dict)
    next: int = 0
    # Triton's TensorData::batch_size_: the batch size of the request that made it (0:
    # a request without a batch dimension), which decides how a step reshapes it.
    batch_size: int = 0

    def add(self, data: Array | None) -> int:
        self.iterations[self.next] = _Iteration(data, self.consumers)
        self.next += 1
        return self.next - 1


# What a running step instance reports: (step, response, whether the step is done), or
# (step, None, True) when it ended after its last response, or (step, error, True).
_Event = tuple[int, InferResponse | ServerError | None, bool]


class _Run:
    """One ensemble request: the tensors' iterations and the step instances in flight."""

    def __init__(self, scheduler: EnsembleScheduler, job: Job) -> None:
        self.s = scheduler
        self.job = job
        self.wanted = set(job.outputs)
        self.steps = scheduler.needed_steps(self.wanted)
        self.tensors: dict[str, _Tensor] = {}
        for index in self.steps:
            for tensor in scheduler.steps[index].input_map.values():
                self.tensors.setdefault(tensor, _Tensor(0)).consumers += 1
        for name in self.wanted:  # the ensemble itself reads its outputs once
            self.tensors.setdefault(name, _Tensor(0)).consumers += 1
        self.events: asyncio.Queue[_Event] = asyncio.Queue()
        self.tasks: set[asyncio.Task[None]] = set()
        self.running = 0  # step instances that have not sent their final response
        self.sent = 0
        self.done = False  # the final response (or flags-only final) is out
        self.result: Outputs | None = None

    async def execute(self) -> Outputs | None:
        """Run to the end: stream to ``job.sink`` (decoupled) or return the one result."""
        updated = []
        for name in self.s.input_names:
            if name in self.tensors:
                self.tensors[name].batch_size = self.job.batch_size
                updated.append((name, self.tensors[name].add(self.job.inputs.get(name))))
        try:
            self._advance(updated)
            while self.running:
                index, item, step_done = await self.events.get()
                if isinstance(item, ServerError):
                    raise item
                if step_done:
                    self.running -= 1
                updated = []
                if item is not None:
                    produced = {out.name: out.array for out in item.outputs}
                    for model_output, tensor in self.s.steps[index].output_map.items():
                        if tensor in self.tensors:
                            data = produced.get(model_output)
                            updated.append((tensor, self.tensors[tensor].add(data)))
                self._advance(updated)
        except BaseException:
            for task in self.tasks:
                task.cancel()
            raise
        if self.tasks:  # each has sent its final response: let their streams close
            await asyncio.wait(self.tasks)
        return self.result

    def _advance(self, updated: list[tuple[str, int]]) -> None:
        """Triton's PrepareSteps: start the steps these new iterations complete, then send
        a response if one is ready (final when no step is left), or finish."""
        ready: set[tuple[int, int]] = set()
        for tensor, iteration in updated:
            for index in self.s.consumers.get(tensor, ()):
                if index in self.steps and all(
                    iteration in self.tensors[t].iterations
                    for t in self.s.steps[index].input_map.values()
                ):
                    ready.add((index, iteration))
        for index, iteration in sorted(ready):
            self._start(index, iteration)
        outputs = self._ensemble_outputs(updated)
        final = self.running == 0
        if outputs is not None:
            self.sent += 1
            self.done = final
            if self.job.sink is not None:
                self.job.sink.send(outputs, final=final, parameters=self.sequence(outputs))
            else:
                self.result = outputs
        elif final and not self.done:
            self._finish_without_response()

    def sequence(self, outputs: Outputs) -> dict[str, ParameterValue] | None:
        """The response's sequence parameters: only for outputs some step made."""
        if any(name in self.s.producer for name in outputs):
            return sequence_parameters(self.job)
        return None

    def _finish_without_response(self) -> None:
        """No step left and no response now: a decoupled ensemble ends with a flags-only
        final; one that never answered cannot make progress (Triton's "deadlock")."""
        self.done = True
        if self.s.decoupled and self.job.sink is not None:
            self.job.sink.send(final=True)
        elif self.sent == 0:
            raise InvalidArgument(
                f"{request_prefix(self.job.request_id)}unexpected deadlock, at least one "
                "output is not set while no more ensemble steps can be made"
            )

    def _take(self, tensor: str, iteration: int) -> Array | None:
        entry = self.tensors[tensor]
        item = entry.iterations[iteration]
        item.uses -= 1
        if item.uses <= 0:
            del entry.iterations[iteration]
        return item.data

    def _start(self, index: int, iteration: int) -> None:
        step = self.s.steps[index]
        shapes = self.s.shapes[index] if self.s.shapes is not None else None
        inputs = []
        batch_size = 0
        for model_input, tensor in step.input_map.items():
            data = self._take(tensor, iteration)
            if data is not None and shapes is not None:
                shape = reshape_dims(
                    shapes.inputs.get(model_input, ()),
                    shapes.batching,
                    self.tensors[tensor].batch_size,
                    data.shape,
                )
                if shape != data.shape:
                    data = data.reshape(shape)
                if shapes.batching and not batch_size and data.ndim:
                    batch_size = int(data.shape[0])  # the step request's batch size
            inputs.append((model_input, data, tensor))
        for tensor in step.output_map.values():
            if tensor in self.tensors:
                self.tensors[tensor].batch_size = batch_size
        request = self.s.step_request(step, inputs, self.job)
        self.running += 1
        task = asyncio.create_task(self._pump(index, request))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _pump(self, index: int, request: InferRequest) -> None:
        """Forward one step instance's responses; a response without the final flag
        parameter is the one response of a model that is not decoupled. Whatever happens
        here ends in an event with ``done`` set, so ``execute`` never waits on a step that
        is gone (a request left unanswered)."""
        final = False
        try:
            async for response in self.s.runner.stream_infer(request):
                flagged = FINAL_FLAG in response.parameters
                final = response.parameters.get(FINAL_FLAG, True) is True
                # Only a decoupled model's flags-only final (no tensors) merely ends the
                # step; any other response sets every mapped output, absent ones to none.
                real = bool(response.outputs) or not (flagged and final)
                self.events.put_nowait((index, response if real else None, final))
        except ServerError as exc:
            self.events.put_nowait((index, exc, True))
            return
        except Exception as exc:  # a defect: fail the request rather than leave it waiting
            error = Internal(f"step '{request.model_name}' failed: {exc!r}")
            self.events.put_nowait((index, error, True))
            return
        if not final:
            self.events.put_nowait((index, None, True))

    def _ensemble_outputs(self, updated: list[tuple[str, int]]) -> Outputs | None:
        """Triton's CheckAndSetEnsembleOutput: the last (in name order) updated requested
        output decides the iteration; every requested output must have it."""
        chosen = None
        for tensor, iteration in sorted(updated):
            if tensor in self.wanted:
                ready = all(iteration in self.tensors[t].iterations for t in self.wanted)
                chosen = iteration if ready else None
        if chosen is None:
            return None
        outputs = {}
        for name in self.job.outputs:
            data = self._take(name, chosen)
            if data is not None and self.s.shapes is not None:
                shape = reshape_dims(
                    self.s.output_dims.get(name, data.shape),
                    self.job.batch_size != 0,
                    self.tensors[name].batch_size,
                    data.shape,
                )
                data = data if shape == data.shape else data.reshape(shape)
            if data is not None:
                outputs[name] = data
        return outputs


def sequence_parameters(job: Job) -> dict[str, ParameterValue]:
    """Triton's ensemble response names the sequence of its outputs that steps made (each
    step's, which is the request's; ensemble_scheduler.cc of r24.10): ``sequence_id`` (0
    when the request has none, a string for a string id), ``sequence_start``,
    ``sequence_end``. An output that is an ensemble input passed through adds none."""
    sequence = job.correlation_id if job.correlation_id is not None else 0
    return {
        "sequence_id": sequence,
        "sequence_start": job.sequence_start,
        "sequence_end": job.sequence_end,
    }


def _matches(config_dims: tuple[int, ...], dims: tuple[int, ...]) -> bool:
    """Triton's CompareDimsWithWildcard."""
    return len(config_dims) == len(dims) and all(
        a == -1 or b == -1 or a == b for a, b in zip(config_dims, dims, strict=True)
    )


def reshape_dims(
    config_dims: tuple[int, ...],
    config_batching: bool,
    tensor_batch_size: int,
    dims: tuple[int, ...],
) -> tuple[int, ...]:
    """Triton's EnsembleContext::ReshapeTensorDims: a tensor made without a batch
    dimension, going to a batching model, whose shape matches the config's dims gets a
    batch of one in front; a tensor made with a batch of one, going where nobody batches,
    whose shape does not match the config's dims loses its batch dimension. Anything
    else keeps its shape (the composing model's own checks then judge it)."""
    dims = tuple(int(d) for d in dims)
    if config_batching == (tensor_batch_size != 0):
        return dims
    if config_batching:
        return (1, *dims) if _matches(config_dims, dims) else dims
    if not _matches(config_dims, dims) and tensor_batch_size == 1:
        return dims[1:]
    return dims


class EnsembleScheduler:
    def __init__(
        self,
        config: mc.ModelConfig,
        runner: StepRunner,
        stats: ModelStats,
        datatypes: dict[str, str],
        clock: Callable[[], int] = time.monotonic_ns,
        shapes: list[StepShapes] | None = None,
    ) -> None:
        """``shapes``: each step's model batching and input dims, which reshape the tensors
        between a batching and a non-batching side as Triton does (None: as they come)."""
        self._config = config
        self.shapes = shapes
        self.output_dims = {
            t.name: tuple(t.reshape.shape) if t.HasField("reshape") else tuple(t.dims)
            for t in config.output
        }
        self.runner = runner
        self._stats = stats
        self._datatypes = datatypes  # every ensemble tensor's datatype (validated at load)
        self._clock = clock
        self._inflight = InFlight()
        self._stopping = False
        self.decoupled = config.model_transaction_policy.decoupled
        self.steps = list(config.ensemble_scheduling.step)
        self.input_names = [t.name for t in config.input]
        self.consumers: dict[str, list[int]] = {}
        self.producer: dict[str, int] = {}
        for index, step in enumerate(self.steps):
            for tensor in step.input_map.values():
                self.consumers.setdefault(tensor, []).append(index)
            for tensor in step.output_map.values():
                self.producer[tensor] = index

    @property
    def inflight(self) -> int:
        return self._inflight.count

    def needed_steps(self, outputs: set[str]) -> set[int]:
        """The steps some requested output depends on (Triton prunes the others)."""
        needed: set[int] = set()
        pending = list(outputs)
        while pending:
            index = self.producer.get(pending.pop())
            if index is not None and index not in needed:
                needed.add(index)
                pending.extend(self.steps[index].input_map.values())
        return needed

    async def submit(self, job: Job) -> ExecutionResult:
        if self._stopping:
            raise Unavailable(f"model '{self._config.name}' is unloading")
        start = self._clock()
        with self._inflight:
            try:
                run = _Run(self, job)
                outputs = await run.execute()
            except ServerError as exc:
                # Triton counts every failure of an ensemble request under OTHER, and
                # twice: once as its error response goes out, once more as the request
                # is released (ensemble_scheduler.cc: FinishEnsemble, then the request
                # tracker's report). This is the second; the core counts the first.
                self._stats.record_failure(self._clock() - start, "OTHER", job.size)
                message = f"in ensemble '{self._config.name}', {exc.message}"
                raise type(exc)(message, failure="OTHER") from None
            except asyncio.CancelledError:  # the steps' own models count their requests
                self._stats.record_cancelled(self._clock() - start, job.size)
                raise
        end = self._clock()
        timings = BatchTimings(start, start, end, end)
        self._stats.record_execution(job.size, timings)
        parameters = run.sequence(outputs) if outputs else None
        return ExecutionResult(outputs or {}, 0, timings, parameters)

    def step_request(
        self,
        step: mc.ModelEnsembling.Step,
        inputs: list[tuple[str, Array | None, str]],
        job: Job,
    ) -> InferRequest:
        return InferRequest(
            model_name=step.model_name,
            model_version="" if step.model_version < 0 else str(step.model_version),
            id=job.request_id,
            inputs=[
                InputTensor(
                    name=model_input,
                    datatype=self._datatypes[tensor],
                    shape=tuple(int(d) for d in data.shape),
                    contents=np.ascontiguousarray(data).reshape(-1),
                )
                for model_input, data, tensor in inputs
                if data is not None
            ],
            outputs=[RequestedOutput(name) for name in step.output_map],
            parameters=self._step_parameters(job),
            model_namespace=step.model_namespace,
        )

    @staticmethod
    def _step_parameters(job: Job) -> dict[str, ParameterValue]:
        """Every step gets the caller's parameters, sequence, priority and timeout, as
        Triton's ensemble scheduler copies them into each step's request."""
        parameters: dict[str, ParameterValue] = dict(job.parameters)
        if job.correlation_id is not None:
            parameters["sequence_id"] = job.correlation_id
            parameters["sequence_start"] = job.sequence_start
            parameters["sequence_end"] = job.sequence_end
        if job.priority:
            parameters["priority"] = job.priority
        if job.timeout_us:
            parameters["timeout"] = job.timeout_us
        return parameters

    async def stop(self) -> None:
        self._stopping = True
        await self._inflight.drained()
