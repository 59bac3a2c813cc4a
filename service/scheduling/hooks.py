"""What the batching drivers share: the driver task, its timer, Triton's test-only hooks."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable

from .timers import WakeTimer

__all__ = ["BACKLOG_DELAY_ENV", "DELAY_ENV", "Driver", "hold_count"]

DELAY_ENV = "TRITONSERVER_DELAY_SCHEDULER"  # hold until N requests are queued (once)
BACKLOG_DELAY_ENV = "TRITONSERVER_BACKLOG_DELAY_SCHEDULER"  # sequence batcher: N in backlog


def hold_count(variable: str) -> int:
    """A test hook's N from the environment; 0 (off) when unset or not a number."""
    try:
        return max(0, int(os.environ.get(variable, "0")))
    except ValueError:
        return 0


class Driver:
    """One asyncio task per scheduler that runs ``step`` whenever it is woken: by a new
    job, a freed instance or its own timer. Started on the first wake, inside the loop."""

    def __init__(self, name: str, step: Callable[[], None]) -> None:
        self._name = name
        self._step = step
        self._event = asyncio.Event()
        self._timer = WakeTimer(self._event.set)
        self._task: asyncio.Task[None] | None = None

    def wake(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name=self._name)
        self._event.set()

    def arm(self, wait_until_ns: int | None, now_ns: int) -> None:
        """Wake again at ``wait_until_ns`` (None: only on the next event)."""
        self._timer.arm(wait_until_ns, now_ns)

    async def _run(self) -> None:
        while True:
            await self._event.wait()
            self._event.clear()
            self._step()

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
        self._timer.close()
