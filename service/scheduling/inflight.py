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

    def __enter__(self) -> None:
        self.count += 1
        self._idle.clear()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.count -= 1
        if not self.count:
            self._idle.set()

    # Work not bounded by one block (a job whose caller is a callback, not a task).
    enter = __enter__

    def leave(self) -> None:
        self.count -= 1
        if not self.count:
            self._idle.set()

    async def drained(self) -> None:
        await self._idle.wait()
