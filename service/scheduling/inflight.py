"""The count of accepted, unfinished work that a graceful stop waits for."""

from __future__ import annotations

import asyncio
from types import TracebackType

__all__ = ["InFlight"]


class InFlight:
    """``with inflight:`` around each piece of accepted work; ``drained()`` returns once
    none is left. Owners refuse new work themselves first (the message is theirs), then
    wait: the core at shutdown, schedulers at unload."""

    __slots__ = ("_idle", "count")

    def __init__(self) -> None:
        self.count = 0
        self._idle = asyncio.Event()
        self._idle.set()

    def enter(self) -> None:
        """One more piece of work (``leave`` when it is done: for work not bounded by
        one block, a job whose caller is a callback rather than a task)."""
        self.count += 1
        if self.count == 1:  # busy from idle; an Event's clear is a call per request
            self._idle.clear()

    def leave(self) -> None:
        self.count -= 1
        if not self.count:
            self._idle.set()

    __enter__ = enter

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.leave()

    async def drained(self) -> None:
        await self._idle.wait()
