"""Response senders handed to request backends, one per request.

``CollectingSender`` serves non-decoupled models: the worker thread collects the single
final response and the scheduler reads it when ``execute_requests`` returns.
``StreamSender`` serves decoupled models: every response crosses to the event loop as it
is sent (``call_soon_threadsafe``) and the caller consumes them as an async iterator.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from wire.datatypes import Array

from ..errors import Internal, ServerError
from ..types import ParameterValue

__all__ = ["CollectingSender", "Response", "StreamSender", "as_server_error"]


@dataclass(frozen=True)
class Response:
    outputs: dict[str, Array] = field(default_factory=dict)
    # A plain message is INTERNAL; a ServerError keeps the code the backend gave it (a
    # Python model's ``TritonError(msg, code)``).
    error: str | ServerError | None = None
    final: bool = False
    parameters: Mapping[str, ParameterValue] | None = None


def as_server_error(error: str | ServerError) -> ServerError:
    return error if isinstance(error, ServerError) else Internal(error)


class _Waited(Protocol):
    """A job as a collector sees it: the future its caller waits on (``base.Job``)."""

    @property
    def future(self) -> asyncio.Future[Any] | None: ...


class CollectingSender:
    def __init__(self, model: str, job: _Waited | None = None) -> None:
        self._model = model
        self._job = job
        self._lock = threading.Lock()
        self.responses: list[Response] = []

    @property
    def cancelled(self) -> bool:
        """The caller stopped waiting (the client cancelled, or its deadline passed): read
        from the backend's thread, as ``request.is_cancelled()`` asks it."""
        future = self._job.future if self._job is not None else None
        return future is not None and future.cancelled()

    def send(
        self,
        outputs: Mapping[str, Array] | None = None,
        error: str | ServerError | None = None,
        final: bool = False,
        parameters: Mapping[str, ParameterValue] | None = None,
    ) -> None:
        with self._lock:
            self.responses.append(Response(dict(outputs or {}), error, final, parameters))

    def result(self) -> dict[str, Array] | ServerError:
        """The response of a non-decoupled request: the first one the model sent (or the
        error it sent instead). As Triton's frontends do, any later one is dropped (e.g. the
        error a Python model raises on a second ``send``, after the first went out)."""
        with self._lock:
            answers = [r for r in self.responses if r.outputs or r.error]
        if not answers:
            return Internal(
                f"model '{self._model}' sent 0 responses for a request; a model "
                "that is not decoupled must send exactly one"
            )
        if answers[0].error is not None:
            return as_server_error(answers[0].error)
        return answers[0].outputs


class StreamSender:
    """Thread-safe producer side of one request's response stream."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._queue: asyncio.Queue[Response] = asyncio.Queue()
        self._closed = False
        self._cancelled = False

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    def cancel(self) -> None:
        """The consumer went away: the model sees ``cancelled`` and further sends are dropped."""
        self._cancelled = True

    def send(
        self,
        outputs: Mapping[str, Array] | None = None,
        error: str | ServerError | None = None,
        final: bool = False,
        parameters: Mapping[str, ParameterValue] | None = None,
    ) -> None:
        if self._closed or self._cancelled:
            return
        self._closed = final
        item = Response(dict(outputs or {}), error, final, parameters)
        self._loop.call_soon_threadsafe(self._queue.put_nowait, item)

    def fail(self, error: ServerError) -> None:
        """The execution itself failed before the model answered: end the stream."""
        self.send(error=error, final=True)

    async def responses(self) -> AsyncIterator[Response]:
        while True:
            item = await self._queue.get()
            yield item
            if item.final:
                return
