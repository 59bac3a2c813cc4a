"""A unary inference's answer, and the same inference driven by callbacks, not a task.

``InferenceServer.infer`` awaits its scheduler in a coroutine; the engine, which reads a
whole frame of requests in one callback, instead starts each request with
``InferenceServer.start_infer`` and answers it from a done-callback on its job's future
(``UnaryCall``): an asyncio task per request, with its coroutine frames and the steps
that wake them, cost the engine's one loop thread more than validating and scheduling
the request did. Both paths build the response and count the request with the same two
functions here, so statistics cannot drift between them.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from ..errors import ServerError, failure_reason
from ..scheduling.base import Enqueuing, ExecutionResult, Job
from ..scheduling.inflight import InFlight
from ..types import InferRequest, InferResponse, OutputTensor
from .model import ModelVersion
from .shaping import shape_outputs
from .validation import typed_outputs

__all__ = [
    "Answered",
    "UnaryCall",
    "answer",
    "count_failure",
    "count_unary_failure",
    "response_of",
]

#: Receives a unary call's response, or its error (a ServerError, or what escaped).
Answered = Callable[[InferResponse | None, BaseException | None], None]


def answer(
    model: ModelVersion,
    job: Job,
    request: InferRequest,
    result: ExecutionResult,
    start: int,
    shape: bool = True,
) -> InferResponse:
    """The response for an executed ``job``, counted as a success. Its outputs' datatypes
    are checked here, where a mismatch is counted as the model's failure; ``shape``: False
    leaves the reshape and classification to the frontend that checked the request
    (core/shaping.py)."""
    outputs = typed_outputs(model, job, result.outputs)
    if shape:
        outputs = shape_outputs(model, request, outputs)
    model.stats.record_success(
        time.monotonic_ns() - start, result.queue_ns, result.timings, job.size
    )
    return response_of(model, request.id, outputs, result, not shape)


def response_of(
    model: ModelVersion,
    request_id: str,
    outputs: list[OutputTensor],
    result: ExecutionResult | None,
    unshaped: bool = False,
) -> InferResponse:
    """The response to send: ``result``'s parameters, if the scheduler set some (None: a
    response cache hit). It keeps the scheduler's ExecutionResult, so a trace needs no
    hook into the core."""
    parameters = dict(result.parameters) if result is not None and result.parameters else {}
    return InferResponse(
        model.name, str(model.version), request_id, outputs, parameters, result, unshaped
    )


def count_failure(
    model: ModelVersion, exc: ServerError, start: int, inferences: int = 0
) -> str | None:
    """Count a request the model had accepted under its failure reason; one refused
    before that (full queue, sequence rules, unloading) is not a failure, as in Triton.
    ``inferences``: the request's batch size (0: not known)."""
    if exc.answered is not None:  # the model's own error response: a success to Triton
        queue_ns, timings, rows = exc.answered
        model.stats.record_success(time.monotonic_ns() - start, queue_ns, timings, rows)
        return None
    reason = failure_reason(exc)
    if reason is not None:
        model.stats.record_failure(time.monotonic_ns() - start, reason, inferences)
    return reason


def count_unary_failure(
    model: ModelVersion, exc: ServerError, start: int, inferences: int = 0
) -> None:
    """``count_failure`` for a unary request, whose backend failures Triton also counts
    apart."""
    if count_failure(model, exc, start, inferences) == "BACKEND":
        model.stats.record_backend_failure()


class UnaryCall:
    """One accepted unary request whose caller is a callback: it holds what the awaiting
    ``infer`` would hold (the core's in-flight count, the model version's lease) from
    ``start_infer`` until it answers or its caller leaves (``cancel``)."""

    __slots__ = (
        "_answered",
        "_inflight",
        "_job",
        "_left",
        "_model",
        "_request",
        "_scheduler",
        "_shape",
        "_start",
    )

    def __init__(
        self,
        inflight: InFlight,
        model: ModelVersion,
        scheduler: Enqueuing,
        request: InferRequest,
        job: Job,
        start: int,
        answered: Answered,
        shape: bool = True,
    ) -> None:
        """``shape``: as for ``answer``."""
        self._inflight = inflight
        self._model = model
        self._scheduler = scheduler
        self._request = request
        self._job = job
        self._start = start
        self._answered = answered
        self._shape = shape
        self._left = False
        inflight.enter()
        model.lease().__enter__()

    @property
    def settled(self) -> bool:
        """Answered, or its caller left: nothing more will happen to it."""
        return self._left

    def finished(self, future: asyncio.Future[ExecutionResult]) -> None:
        """The job's future is done: answer (unless the caller already left)."""
        if self._left:
            return
        self._left = True
        self._release()
        model = self._model
        start = self._start
        try:
            error = future.exception()
            if error is not None:
                raise error
            response = answer(model, self._job, self._request, future.result(), start, self._shape)
        except ServerError as exc:
            count_unary_failure(model, exc, start, self._job.size)
            self._answered(None, exc)
            return
        except BaseException as exc:  # every request ends with an answer
            self._answered(None, exc)
            return
        self._answered(response, None)

    def cancel(self) -> None:
        """The caller left (a CANCEL, its frontend gone): the scheduler drops or counts
        the job exactly as when an awaiting ``infer`` is cancelled; no answer follows."""
        if self._left:
            return
        self._left = True
        self._release()
        self._scheduler.abandon(self._job)

    def _release(self) -> None:
        self._inflight.leave()
        self._model.lease().__exit__(None, None, None)
