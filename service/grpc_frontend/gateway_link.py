"""The REST gateways following this process: told when the stop begins, and waited for.

Triton stops its HTTP endpoint before anything else (src/main.cc, ``HTTPServer::Stop``):
new connections are refused, requests on the open ones are still served, and once a
second it logs ``Timeout N: Found M HTTP service connections``, counting the exit timeout
down, until none is left or the timeout is spent; only then does the core stop
(``Waiting for in-flight requests to complete.``) with what the countdown left. Our HTTP
endpoint is another process (``gateway/``) that the signal need not reach (Triton's qa
signals the server's one pid), so each gateway holds one call of this private method open
on its channel: at the stop it gets a notice with the exit timeout, runs Triton's HTTP
stop itself (the countdown lines are its), and answers with the seconds it left.

Wire (``wire/gateway_link.py``): service to gateway ``{"stop": seconds}``; gateway to
service ``{"busy": 0 or 1}`` as the call starts and whenever it changes, and at the end
``{"left": seconds, "cut": n}`` (the requests in flight it cut off when the exit timeout
was spent: work left, so the stop ends with exit code 1, as Triton's), then its
half-close. A caller that is not a gateway can at most
hold the stop for the exit timeout, which bounds the wait
(docs/decisions/033-http-connections-before-the-core-stops.md).

How many followers hold HTTP connections (or have not said: an older gateway, or one
whose first word is on its way) goes to ``on_busy`` at each change: the process that
takes the stop signal reads it to know whether new requests may be refused at once
(``service/admission.py``, decision 053).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc

from wire import gateway_link

__all__ = ["GatewayLinks"]

log = logging.getLogger(__name__)

#: Beyond the exit timeout: the gateway's last answers and its report on the way.
_REPORT_MARGIN_S = 2.0


class _Follower:
    """One gateway's call: whether it holds HTTP connections (until it says, it may),
    its report of the HTTP stop (None: gone without one) and the requests it cut off."""

    __slots__ = ("busy", "cut", "report")

    def __init__(self, report: asyncio.Future[float | None]) -> None:
        self.busy = True
        self.cut = 0
        self.report = report


class GatewayLinks:
    """One process's gateway calls (``rpc_handler``) and the HTTP stop (``stop_http``);
    ``on_busy(n)``: the followers holding HTTP connections are now ``n``."""

    def __init__(self, on_busy: Callable[[int], None] | None = None) -> None:
        self._followers: set[_Follower] = set()
        self._stopping = asyncio.Event()
        self._seconds = 0.0
        self.on_busy = on_busy
        self._busy = 0
        #: Requests in flight that the gateways cut off when the exit timeout was spent
        #: on their HTTP connections (their reports): work left, so the stop exits 1.
        self.cut = 0

    @property
    def following(self) -> int:
        """Gateways following this process now."""
        return len(self._followers)

    @property
    def busy(self) -> int:
        """Followers that hold HTTP connections, or have not said whether they do."""
        return self._busy

    def _changed(self) -> None:
        busy = sum(1 for f in self._followers if f.busy)
        if busy == self._busy:
            return
        self._busy = busy
        log.debug(
            "REST gateways following: %d, holding HTTP connections: %d",
            len(self._followers),
            busy,
            extra={"verbose": 1},
        )
        if self.on_busy is not None:
            self.on_busy(busy)

    def rpc_handler(self) -> grpc.GenericRpcHandler[Any, Any]:
        """For ``grpc.aio.Server.add_generic_rpc_handlers``; raw bytes both ways."""
        follow = grpc.stream_stream_rpc_method_handler(self._follow)
        return grpc.method_handlers_generic_handler(
            gateway_link.SERVICE, {gateway_link.METHOD: follow}
        )

    async def _follow(
        self, requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[bytes]:
        """Held open until the stop: then the notice, and the gateway's report awaited.
        Its frames are read all along (``_read``). A gateway that goes away (its call
        cancelled) resolves its report as None."""
        follower = _Follower(asyncio.get_running_loop().create_future())
        self._followers.add(follower)
        self._changed()  # it may hold connections until it says
        reader = asyncio.create_task(self._read(requests, follower))
        try:
            await context.send_initial_metadata(())  # the gateway knows it is followed
            await self._stopping.wait()
            yield gateway_link.encode(gateway_link.STOP, self._seconds)
            await follower.report
        finally:
            reader.cancel()
            self._followers.discard(follower)
            if not follower.report.done():
                follower.report.set_result(None)
            self._changed()

    async def _read(self, requests: AsyncIterator[bytes], follower: _Follower) -> None:
        """The gateway's frames: whether it holds HTTP connections, then its report."""
        try:
            async for frame in requests:
                busy = gateway_link.flag(frame, gateway_link.BUSY)
                if busy is not None:
                    follower.busy = busy
                    self._changed()
                    continue
                left = gateway_link.seconds(frame, gateway_link.LEFT)
                if left is not None and not follower.report.done():
                    follower.cut = int(gateway_link.seconds(frame, gateway_link.CUT) or 0)
                    follower.report.set_result(left)
        finally:
            if not follower.report.done():
                follower.report.set_result(None)

    async def stop_http(self, seconds: float) -> float:
        """Tell every gateway that the stop begins and wait until each has stopped its
        HTTP endpoint (at most ``seconds`` and a margin); returns the exit timeout left
        to the core: the least a gateway reported, ``seconds`` when none follows. A
        gateway gone without a report counts the whole seconds it took. Never more than
        the clock left of ``seconds``: a gateway signalled on its own (serve.sh signals
        both) counts down its own exit timeout, which may be longer. ``cut`` then holds
        the requests the gateways cut off."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        self._seconds = seconds
        followers = list(self._followers)
        self._stopping.set()
        if not followers:
            return seconds
        reports = [f.report for f in followers]
        done, _ = await asyncio.wait(reports, timeout=seconds + _REPORT_MARGIN_S)
        self.cut = sum(f.cut for f in followers)
        by_clock = max(0.0, seconds - int(loop.time() - started))
        lefts = [left for left in (r.result() for r in done) if left is not None]
        return min([*lefts, by_clock])
