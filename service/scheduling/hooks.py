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
    """Runs a scheduler's ``step`` soon after it is woken: by a new job, a freed instance or
    its own timer. Wakes before the step runs coalesce into one ``call_soon`` (no task and
    no event per wake-up), so the step sees every job submitted in the meantime."""

    def __init__(self, name: str, step: Callable[[], None]) -> None:
        self.name = name
        self._step = step
        self._scheduled = False
        self._closed = False
        self._timer = WakeTimer(self.wake)
        self._loop: asyncio.AbstractEventLoop | None = None  # bound at the first wake

    def wake(self) -> None:
        if not self._scheduled and not self._closed:
            self._scheduled = True
            loop = self._loop
            if loop is None:  # once: get_running_loop costs a system call on 3.11
                loop = self._loop = asyncio.get_running_loop()
            loop.call_soon(self._run)

    def _run(self) -> None:
        self._scheduled = False
        if not self._closed:
            self._step()

    def arm(self, wait_until_ns: int | None, now_ns: int) -> None:
        """Wake again at ``wait_until_ns`` (None: only on the next event)."""
        self._timer.arm(wait_until_ns, now_ns)

    def close(self) -> None:
        self._closed = True
        self._timer.close()
