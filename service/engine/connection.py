"""One frontend as the engine sees it: its channel, its slabs, its requests in flight.

A unary request to a model of one request per job (no shared memory, no response
cache, not traced) is started while its frame is read (``InferenceServer.start_infer``)
and answered from a callback when its job is done: no task, which the engine's one loop
thread could not afford per request. Every other request is one task running the core's
own ``infer`` / ``stream_infer``. Both are the core's own code, so batching, sequences,
statistics and model control behave exactly as in one process. Every request id ends
with exactly one terminal message, also when it was cancelled (even before its task
ran: ``_cancelled``): that is when the frontend may reuse the request's slab blocks.
When the frontend goes away its requests are cancelled and its slabs dropped.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import pickle
from collections.abc import Callable
from typing import Any

from ..channel.framing import Channel
from ..channel.messages import (
    CALL,
    CANCEL,
    END,
    ERROR,
    FREE,
    INFER,
    ITEM,
    REPLY,
    RESULT,
    STREAM,
    Echo,
    decode_request,
    encode_response,
)
from ..channel.slabs import Arena, ArenaMap
from ..core.checked import Checked
from ..core.unary import UnaryCall
from ..errors import Internal, ServerError
from ..telemetry.spans import begin_request
from ..telemetry.tracing import Tracing
from ..types import InferRequest, InferResponse

__all__ = ["FrontendConnection"]

log = logging.getLogger(__name__)

Calls = Callable[[str, tuple[Any, ...]], Any]


def portable(exc: BaseException) -> BaseException:
    """The exception as the frontend should raise it (it must survive pickling)."""
    if isinstance(exc, ServerError):
        return exc
    try:
        pickle.dumps(exc)
    except Exception:
        return Internal(str(exc))
    return exc


class FrontendConnection:
    def __init__(
        self,
        name: str,
        core: Any,
        tracing: Tracing,
        calls: Calls,
        requests: ArenaMap,
        responses: Arena,
        on_closed: Callable[[FrontendConnection], None],
    ) -> None:
        self.name = name
        self._core = core
        self._tracing = tracing
        self._calls = calls
        self._requests = requests
        self._responses = responses
        self._on_closed = on_closed
        self._tasks: dict[int, asyncio.Task[None]] = {}
        self._unary: dict[int, UnaryCall] = {}  # started by start_infer, not yet answered
        self.channel = Channel(self._received, self._lost)
        # Bound once: asyncio.get_running_loop costs a getpid syscall per call on 3.11.
        self._loop = asyncio.get_running_loop()
        self.closed = self._loop.create_future()

    @property
    def inflight(self) -> int:
        return len(self._tasks) + len(self._unary)

    @property
    def response_slab_bytes(self) -> int:
        return self._responses.in_use

    def send(self, message: Any) -> None:
        self.channel.send(message)

    def _received(self, messages: list[Any]) -> None:
        loop = self._loop
        for message in messages:
            op = message[0]
            if op == INFER:
                rid = message[1]
                blocks: list[tuple[int, int]] = []
                request = decode_request(message[2], self._requests, blocks)
                echo = Echo(self._requests, blocks) if blocks else None
                if not self._tracing.active:
                    try:
                        call = self._core.start_infer(
                            request, functools.partial(self._answered, rid, echo), message[4]
                        )
                    except BaseException as exc:  # a refusal: answered now
                        self.channel.send((ERROR, rid, portable(exc)))
                        continue
                    if call is not None:
                        if not call.settled:  # else answered already (run on the loop)
                            self._unary[rid] = call
                        continue
                self._tasks[rid] = loop.create_task(
                    self._infer(rid, request, message[3], message[4], echo)
                )
            elif op == STREAM:
                rid = message[1]
                request = decode_request(message[2], self._requests)
                self._tasks[rid] = loop.create_task(self._stream(rid, request, message[3]))
            elif op == FREE:
                free = self._responses.free
                for offset in message[1]:
                    free(offset)
            elif op == CANCEL:
                unary = self._unary.pop(message[1], None)
                if unary is not None:
                    unary.cancel()
                    self.channel.send((ERROR, message[1], None))
                    continue
                task = self._tasks.get(message[1])
                if task is not None:
                    task.cancel()
                    task.add_done_callback(functools.partial(self._cancelled, message[1]))
            elif op == CALL:
                rid = message[1]
                self._tasks[rid] = loop.create_task(self._call(rid, message[2], message[3]))
            else:
                log.error("frontend %s sent an unknown message %r", self.name, op)

    def _cancelled(self, rid: int, task: asyncio.Task[None]) -> None:
        """A cancelled request's task is done. One cancelled before its first step never
        ran its body, so it neither answered nor left the table: that is a CANCEL read
        together with its request (frames queue in the socket while the engine is busy,
        and a caller's deadline can pass as its request is sent). Before, its entry stayed
        here, and the frontend's entry and slab blocks for it, as long as both ran."""
        if self._tasks.get(rid) is task:
            del self._tasks[rid]
            self.channel.send((ERROR, rid, None))

    def _answered(
        self,
        rid: int,
        echo: Echo | None,
        response: InferResponse | None,
        error: BaseException | None,
    ) -> None:
        """A started unary request's answer (``UnaryCall``: once, unless cancelled);
        one run on the loop's thread is answered before ``_received`` registers it.
        ``echo``: its input blocks, which an output may be a view of (not copied then)."""
        self._unary.pop(rid, None)
        if response is not None:
            try:
                self.channel.send((RESULT, rid, encode_response(response, self._responses, echo)))
                return
            except BaseException as exc:  # every request ends with an answer
                error = exc
        self.channel.send((ERROR, rid, portable(error or Internal("no response"))))

    async def _infer(
        self,
        rid: int,
        request: InferRequest,
        carrier: Any,
        checked: Checked | None,
        echo: Echo | None = None,
    ) -> None:
        send = self.channel.send
        try:
            tracing = self._tracing
            if tracing.active:
                trace = begin_request(tracing, "ModelInfer", request, carrier)
                if trace is not None:
                    with trace:
                        response = await self._core.infer(request, checked)
                        trace.executed(response.timings)
                        trace.answered(response)
                    send((RESULT, rid, encode_response(response, self._responses, echo)))
                    return
            # Untraced: the frontend that checked the request shapes its outputs.
            response = await self._core.infer(request, checked, True)
            send((RESULT, rid, encode_response(response, self._responses, echo)))
        except asyncio.CancelledError:
            send((ERROR, rid, None))
        except BaseException as exc:  # every request ends with an answer
            send((ERROR, rid, portable(exc)))
        finally:
            del self._tasks[rid]

    async def _stream(self, rid: int, request: InferRequest, carrier: Any) -> None:
        send = self.channel.send
        tracing = self._tracing
        trace = (
            begin_request(tracing, "ModelStreamInfer", request, carrier) if tracing.active else None
        )
        try:
            if trace is None:
                async for response in self._core.stream_infer(request):
                    send((ITEM, rid, encode_response(response, self._responses)))
            else:
                with trace:
                    try:
                        async for response in self._core.stream_infer(request, trace.record):
                            send((ITEM, rid, encode_response(response, self._responses)))
                            trace.sent(response)
                    except ServerError as exc:
                        trace.fail(exc.message)
                        raise
            send((END, rid))
        except asyncio.CancelledError:
            send((ERROR, rid, None))
        except BaseException as exc:
            send((ERROR, rid, portable(exc)))
        finally:
            del self._tasks[rid]

    async def _call(self, rid: int, name: str, args: tuple[Any, ...]) -> None:
        try:
            result = self._calls(name, args)
            if asyncio.iscoroutine(result):
                result = await result
            self.channel.send((REPLY, rid, result))
        except asyncio.CancelledError:
            self.channel.send((ERROR, rid, None))
        except BaseException as exc:
            self.channel.send((ERROR, rid, portable(exc)))
        finally:
            del self._tasks[rid]

    def _lost(self, exc: Exception | None) -> None:
        """The frontend is gone: its requests are cancelled and its slabs dropped."""
        for task in list(self._tasks.values()):
            task.cancel()
        unary, self._unary = self._unary, {}
        for call in unary.values():
            call.cancel()
        self._requests.close()
        self._responses.close()
        if not self.closed.done():
            self.closed.set_result(None)
        self._on_closed(self)
