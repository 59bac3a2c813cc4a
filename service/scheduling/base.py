"""The one interface every scheduler implements, and the units of work it handles."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from wire.datatypes import Array

from ..types import ExecutionResult, TraceParent

if TYPE_CHECKING:
    from .responses import StreamSender

__all__ = ["Array", "Enqueuing", "ExecutionResult", "Job", "Scheduler", "SequenceHolder"]


@dataclass(slots=True, eq=False)
class Job:
    """One validated request, ready for a backend: model-side names and shapes."""

    inputs: dict[str, Array]
    outputs: list[str]
    batch_size: int  # 0 for models without a batch dimension
    request_id: str = ""
    priority: int = 0  # 0: the model's default level
    timeout_us: int = 0  # 0: the queue policy's default
    correlation_id: int | str | None = None  # sequence models: the sequence this belongs to
    sequence_start: bool = False
    sequence_end: bool = False
    parameters: dict[str, Any] = field(default_factory=dict)  # for request backends
    sink: StreamSender | None = field(default=None, repr=False)  # decoupled models only
    trace_context: TraceParent | None = field(default=None, repr=False)  # a traced request's
    # Iterative sequences: the model may release it with RESCHEDULE (it started its
    # sequence), and did so in the execution that just ran (it runs again).
    reschedulable: bool = False
    rescheduled: bool = False
    # Set by schedulers:
    enqueue_ns: int = 0
    deadline_ns: int | None = None
    seq: int = 0
    started: bool = False  # an instance thread took it (default scheduler)
    future: asyncio.Future[ExecutionResult] | None = field(default=None, repr=False)
    _shape_key: tuple[tuple[str, tuple[int, ...]], ...] | None = field(default=None, repr=False)

    @property
    def size(self) -> int:
        """Inferences this job adds to a batch (an unbatched request counts as one)."""
        return max(self.batch_size, 1)

    def shape_key(self) -> tuple[tuple[str, tuple[int, ...]], ...]:
        """Jobs batch together only when every input agrees beyond the batch dimension.

        Computed once: the batching rules ask again for every queued job at every step."""
        if self._shape_key is None:
            self._shape_key = tuple(
                sorted((name, tuple(a.shape[1:])) for name, a in self.inputs.items())
            )
        return self._shape_key


class Scheduler(Protocol):
    async def submit(self, job: Job) -> ExecutionResult:
        """Run ``job`` on some instance and return its own outputs and timings."""
        ...

    @property
    def inflight(self) -> int:
        """Jobs accepted and not yet finished (queued or executing)."""
        ...

    async def stop(self) -> None:
        """Wait for accepted jobs to finish, then release the instances."""
        ...


class Enqueuing:
    """A scheduler whose jobs can be waited on without a task: the engine answers the
    requests of a frame from callbacks on each job's future (core/unary.py), since an
    asyncio task per request cost its loop more than the scheduling itself. The
    schedulers of one request per job (default, dynamic batching) are; sequences and
    ensembles are awaited through ``submit``."""

    __slots__ = ()

    async def submit(self, job: Job) -> ExecutionResult:
        """``Scheduler.submit``: the same job awaited by a task."""
        future = self.enqueue(job)
        try:
            return await future
        except asyncio.CancelledError:
            self.abandon(job)
            raise

    def enqueue(self, job: Job) -> asyncio.Future[ExecutionResult]:
        """Accept ``job`` (or raise the refusal); the future gets its outcome. The job
        counts as in flight until the future is settled or ``abandon`` is called."""
        raise NotImplementedError

    def abandon(self, job: Job) -> None:
        """The caller of an enqueued ``job`` stopped waiting (cancelled, deadline, its
        frontend gone): dropped if it has not run, counted where it ends otherwise."""
        raise NotImplementedError


@runtime_checkable
class SequenceHolder(Protocol):
    """A scheduler that keeps sequences. While the server shuts down, Triton refuses new
    sequences but still takes the remaining requests of those in progress, and waits for
    them to end: the core asks these two (at shutdown only)."""

    def continues_sequence(self, correlation_id: int | str) -> bool:
        """``correlation_id`` is a sequence in progress here (started, not yet ended)."""
        ...

    def active_sequences(self) -> int:
        """Sequences started and not yet ended or released for idling."""
        ...
