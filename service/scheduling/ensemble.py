"""The ensemble scheduler: runs the step DAG, each step as a request to its own model.

A step starts as soon as all its input tensors exist, so independent steps run
concurrently; each composing model keeps its own scheduler (and batching). Steps go
through a ``StepRunner``, the core's transport-neutral infer, so composing models are
validated, scheduled and counted exactly as if a client had called them.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Protocol

import numpy as np

from inference import model_config_pb2 as mc

from ..errors import ServerError, Unavailable
from ..statistics import BatchTimings, ModelStats
from ..types import InferRequest, InferResponse, InputTensor, ParameterValue, RequestedOutput
from .base import Array, ExecutionResult, Job
from .inflight import InFlight

__all__ = ["EnsembleScheduler", "StepRunner"]


class StepRunner(Protocol):
    async def infer(self, request: InferRequest) -> InferResponse: ...


class EnsembleScheduler:
    def __init__(
        self,
        config: mc.ModelConfig,
        runner: StepRunner,
        stats: ModelStats,
        datatypes: dict[str, str],
        clock: Callable[[], int] = time.monotonic_ns,
    ) -> None:
        self._config = config
        self._runner = runner
        self._stats = stats
        self._datatypes = datatypes  # every ensemble tensor's datatype (validated at load)
        self._clock = clock
        self._inflight = InFlight()
        self._stopping = False

    @property
    def inflight(self) -> int:
        return self._inflight.count

    async def submit(self, job: Job) -> ExecutionResult:
        if self._stopping:
            raise Unavailable(f"model '{self._config.name}' is unloading")
        start = self._clock()
        with self._inflight:
            try:
                tensors = await self._run_steps(job)
            except asyncio.CancelledError:  # the steps' own models count their requests
                self._stats.record_cancelled(self._clock() - start)
                raise
        end = self._clock()
        timings = BatchTimings(start, start, end, end)
        self._stats.record_execution(job.size, timings)
        return ExecutionResult({name: tensors[name] for name in job.outputs}, 0, timings)

    async def _run_steps(self, job: Job) -> dict[str, Array]:
        tensors: dict[str, Array] = dict(job.inputs)
        pending = list(self._config.ensemble_scheduling.step)
        parameters = self._step_parameters(job)
        running: dict[asyncio.Task[dict[str, Array]], mc.ModelEnsembling.Step] = {}
        try:
            while pending or running:
                for step in [s for s in pending if set(s.input_map.values()) <= tensors.keys()]:
                    pending.remove(step)
                    task = asyncio.create_task(self._run_step(step, tensors, parameters, job))
                    running[task] = step
                if not running:  # validated at load; guards against a silent hang
                    raise Unavailable(f"ensemble '{self._config.name}' has steps that cannot run")
                done, _ = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    running.pop(task)
                    tensors.update(task.result())
        finally:
            for task in running:
                task.cancel()
        return tensors

    async def _run_step(
        self,
        step: mc.ModelEnsembling.Step,
        tensors: dict[str, Array],
        parameters: dict[str, ParameterValue],
        job: Job,
    ) -> dict[str, Array]:
        request = InferRequest(
            model_name=step.model_name,
            model_version="" if step.model_version < 0 else str(step.model_version),
            id=job.request_id,
            inputs=[
                InputTensor(
                    name=model_input,
                    datatype=self._datatypes[tensor],
                    shape=tuple(int(d) for d in tensors[tensor].shape),
                    contents=np.ascontiguousarray(tensors[tensor]).reshape(-1),
                )
                for model_input, tensor in step.input_map.items()
            ],
            outputs=[RequestedOutput(name) for name in step.output_map],
            parameters=dict(parameters),
        )
        try:
            response = await self._runner.infer(request)
        except ServerError as exc:
            message = exc.message.removeprefix(f"[request id: {job.request_id}] ")
            raise type(exc)(f"in ensemble '{self._config.name}', {message}") from None
        produced = {out.name: out.array for out in response.outputs}
        return {tensor: produced[name] for name, tensor in step.output_map.items()}

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
