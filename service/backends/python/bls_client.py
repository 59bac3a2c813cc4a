"""BLS in the worker: a model's own inference requests go to the server, responses return.

``InferenceRequest(...).exec()`` (``pb_utils``) lands in ``BlsClient.execute``: the
request's tensors travel as any response's do (small ones inside the message, large ones
in one of this worker's shared regions), the server runs it through the called model's
scheduler (``bls.py`` on its side) and answers with ``bls_response`` messages, which the
worker's reader thread hands to the waiting call. ``exec`` blocks the calling thread only,
until the first response is here; ``decoupled=True`` then returns an iterator whose last
response is marked final, as Triton's ``ResponseIterator`` (python_backend r24.10).

``pb_utils.load_model``, ``unload_model`` and ``is_model_ready`` are ``control`` calls on
the same channel: the server answers each with one ``control_reply``.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import queue
import threading
from collections.abc import Iterator
from typing import Any

from . import triton_python_backend_utils as pb_utils
from .pb_core import BF16
from .protocol import Channel

__all__ = ["BlsClient", "ResponseIterator"]

Answer = tuple[pb_utils.InferenceResponse, bool]  # a response, and whether it is the last


class ResponseIterator:
    """The responses of a ``decoupled=True`` BLS request, until the final one: ``first``,
    already received, then the rest as they arrive."""

    def __init__(self, answers: queue.Queue[Answer], first: Answer) -> None:
        self._answers = answers
        self._first: Answer | None = first
        self._finished = False

    def __iter__(self) -> Iterator[pb_utils.InferenceResponse]:
        return self

    def __next__(self) -> pb_utils.InferenceResponse:
        if self._finished:
            raise StopIteration
        if self._first is not None:
            (response, final), self._first = self._first, None
        else:
            response, final = self._answers.get()
        self._finished = final
        return response


class BlsClient:
    def __init__(self, channel: Channel) -> None:
        self.channel = channel
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._released = False  # a reference given back since the last barrier
        self._waiting: dict[int, queue.Queue[Answer]] = {}
        self._controls: dict[int, queue.Queue[tuple[Any, str | None]]] = {}

    def execute(self, request: pb_utils.InferenceRequest, decoupled: bool) -> Any:
        """Any thread of the model's: send ``request``, return its response (or an
        iterator over them). Inputs are read here, so the caller may reuse its arrays."""
        target = request._bls_target()
        inputs = request.inputs()
        packed = self.channel.pack([[(t.name(), t.host_array()) for t in inputs]])
        bf16 = [t.name() for t in inputs if t.triton_dtype() == BF16]
        answers: queue.Queue[Answer] = queue.Queue()
        with self._lock:
            bls_id = next(self._ids)
            self._waiting[bls_id] = answers
        try:
            message = ("bls", bls_id, decoupled, target, packed.refs[0], packed.region, bf16)
            self.channel.send(message, packed.fd)
        finally:
            if packed.fd is not None:
                os.close(packed.fd)
        # As Triton's ``InferRequest::Exec``: the call returns once the first response is
        # here, decoupled or not. ``async_exec`` runs this in an executor thread, so an
        # ``async def execute`` awaiting it leaves the event loop free meanwhile; iterating
        # the responses on the loop then waits only for those still to come.
        first = answers.get()
        return ResponseIterator(answers, first) if decoupled else first[0]

    def control(self, operation: str, *args: Any) -> Any:
        """A model-control call (``model_control.py`` on the server's side)."""
        return self.call("control", operation, *args)

    def metric(self, operation: str, *args: Any) -> Any:
        """A custom-metrics call (``metric_calls.py`` on the server's side)."""
        return self.call("metric", operation, *args)

    def metric_release(self, operation: str, *args: Any) -> None:
        """A reference given back (from a collected object): nothing to wait for, and
        nothing to do once the server is gone."""
        with contextlib.suppress(OSError):
            self.channel.send(("metric", 0, operation, args))
            self._released = True

    def release_barrier(self) -> None:
        """Before an execute's answer leaves on the calls link: once the server has
        served every reference given back during the call. Releases travel on the services
        link, unanswered, so without this a client could read ``/metrics`` after its
        response and still see a family the model dropped (Triton's stub releases
        synchronously). One round trip, only after a release."""
        if self._released:
            self._released = False
            with contextlib.suppress(OSError, pb_utils.TritonModelException):
                self.call("metric", "barrier")

    def call(self, tag: str, operation: str, *args: Any) -> Any:
        """Send one call and wait for its ``control_reply``: the result, or
        TritonModelException with the server's text."""
        answers: queue.Queue[tuple[Any, str | None]] = queue.Queue()
        with self._lock:
            call_id = next(self._ids)
            self._controls[call_id] = answers
        self.channel.send((tag, call_id, operation, args))
        result, error = answers.get()
        if error is not None:
            raise pb_utils.TritonModelException(error)
        return result

    def deliver_control(self, message: tuple[Any, ...]) -> None:
        """The reader thread: the answer to a ``control`` call."""
        _, call_id, result, error = message
        with self._lock:
            answers = self._controls.pop(call_id, None)
        if answers is not None:
            answers.put((result, error))

    def deliver(self, message: tuple[Any, ...], fd: int | None) -> None:
        """The reader thread: one ``bls_response`` for a waiting call."""
        _, bls_id, refs, region, error, final, bf16 = message
        (tensors,) = self.channel.unpack([refs or []], region, fd)
        response = pb_utils.InferenceResponse(
            [
                pb_utils.Tensor(name, array, BF16 if name in bf16 else None)
                for name, array in tensors
            ],
            error=pb_utils.TritonError(error) if error is not None else None,
        )
        with self._lock:
            answers = self._waiting.pop(bls_id, None) if final else self._waiting.get(bls_id)
        if answers is not None:
            answers.put((response, final))
