"""The answers still on their way out when the server stops.

The process ends without grpc's own shutdown (see app.py), so before it ends the
frontend waits for the RPCs that owe an answer: each inference answered once shutdown
has begun, and each open stream (until it has ended). ``context.add_done_callback``
says when an RPC's status has gone out.
"""

from __future__ import annotations

import asyncio
from typing import Any

import grpc

from ..core.inference_server import STOPPING

__all__ = ["AnswerTracker", "refuse_stream"]

Context = grpc.aio.ServicerContext[Any, Any]


class AnswerTracker:
    __slots__ = ("_pending", "stopping")

    def __init__(self) -> None:
        self.stopping = False  # set at shutdown: from then on, answers are tracked
        self._pending: set[asyncio.Future[None]] = set()

    def track(self, context: Context) -> None:
        """Wait for this RPC's end before the process ends."""
        sent: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._pending.add(sent)

        def done(_: Context) -> None:
            self._pending.discard(sent)
            if not sent.done():
                sent.set_result(None)

        context.add_done_callback(done)  # type: ignore[arg-type]  # stubs: a class, not a Callable

    async def sent(self, seconds: float) -> bool:
        """Wait up to ``seconds`` for the tracked RPCs to end; False when some have not."""
        if not self._pending:
            return True
        _, late = await asyncio.wait(set(self._pending), timeout=seconds)
        return not late


def refuse_stream(context: Context) -> None:
    """A stream the server ends at shutdown while the client may still be sending on it:
    UNAVAILABLE, so that a request the server never read does not wait forever (Triton's
    shutdown ends open streams with an error too)."""
    context.set_code(grpc.StatusCode.UNAVAILABLE)
    context.set_details(STOPPING)
