"""Decoupled models: zero, one or many responses per request, as the model sends them.

The request's ``StreamSender`` is the job's sink; the execution itself returns when the
model's ``execute`` returns, while responses may keep coming from the model's threads.
Each response becomes an ``InferResponse`` carrying ``triton_final_response``, and is
counted per response index as the statistics extension defines. The execution's timings
(queue, compute) go to the caller's ``ExecutionRecord`` when it passes one (a trace).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable

from ..errors import Internal, ServerError
from ..scheduling.base import ExecutionResult, Job
from ..scheduling.responses import Response, StreamSender, as_server_error
from ..types import FINAL_FLAG, ExecutionRecord, InferResponse, OutputTensor
from .classification import classify_outputs
from .model import ModelVersion
from .validation import build_outputs

__all__ = ["FINAL_FLAG", "stream_responses"]

ENABLE_EMPTY_FINAL = "triton_enable_empty_final_response"


def _outputs(
    model: ModelVersion, job: Job, response: Response, classes: dict[str, int] | None
) -> list[OutputTensor]:
    present = [name for name in job.outputs if name in response.outputs]
    view = Job(job.inputs, present, job.batch_size)
    outputs = build_outputs(model, view, response.outputs)
    return classify_outputs(model, outputs, classes) if classes else outputs


async def stream_responses(
    model: ModelVersion,
    job: Job,
    request_id: str,
    enable_empty_final: bool,
    record: ExecutionRecord | None = None,
    on_result: Callable[[ExecutionResult], None] | None = None,
    classes: dict[str, int] | None = None,
) -> AsyncIterator[InferResponse]:
    """Yield the model's responses for ``job`` as they arrive; raise on an error response.

    With a ``record``, the stream also waits, after its final response has gone out, for
    the model's ``execute`` to return, and leaves the execution's timings in the record.
    ``on_result`` gets those timings whenever ``execute`` returns (possibly after the
    stream ended), without anyone waiting for it. ``classes``: outputs asked as
    classification (``requested_classes``).
    """
    assert model.scheduler is not None
    sink = StreamSender(asyncio.get_running_loop())
    job.sink = sink
    execution = asyncio.ensure_future(model.scheduler.submit(job))

    def on_done(done: asyncio.Future[ExecutionResult]) -> None:
        if done.cancelled():
            sink.cancel()
        elif isinstance(done.exception(), ServerError):
            sink.fail(done.exception())  # type: ignore[arg-type]
        elif done.exception() is not None:
            sink.fail(Internal(str(done.exception())))
        else:
            if record is not None:
                record.result = done.result()
            if on_result is not None:
                on_result(done.result())

    execution.add_done_callback(on_done)
    index = 0
    last = time.monotonic_ns()
    finished = False
    try:
        async for response in sink.responses():
            arrived = time.monotonic_ns()
            if response.error is not None:
                model.stats.record_response(index, arrived - last, 0, ok=False)
                finished = True
                raise as_server_error(response.error)
            outputs = _outputs(model, job, response, classes)
            done = time.monotonic_ns()
            if outputs:
                model.stats.record_response(index, arrived - last, done - arrived, ok=True)
            else:
                model.stats.record_response(index, arrived - last, 0, ok=True, empty=True)
            last = done
            index += 1
            finished = response.final
            if outputs or (response.final and enable_empty_final):
                yield InferResponse(
                    model_name=model.name,
                    model_version=str(model.version),
                    id=request_id,
                    outputs=outputs,
                    parameters={**(response.parameters or {}), FINAL_FLAG: response.final},
                )
        if record is not None and not execution.done():
            # The final response may come before ``execute`` returns (sent from inside it);
            # ``on_done`` fills the record first (callbacks run in the order they were added).
            await asyncio.wait((execution,))
    finally:
        if not finished:  # the caller went away mid-stream: the model stops sending
            sink.cancel()
            model.stats.record_response(index, 0, 0, ok=False, cancelled=True)
