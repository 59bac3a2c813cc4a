"""What the batching drivers share: Triton's test-only hold hooks and the wake-up timer."""

from __future__ import annotations

import asyncio
import os

__all__ = ["BACKLOG_DELAY_ENV", "DELAY_ENV", "WakeTimer", "hold_count"]

DELAY_ENV = "TRITONSERVER_DELAY_SCHEDULER"  # hold until N requests are queued (once)
BACKLOG_DELAY_ENV = "TRITONSERVER_BACKLOG_DELAY_SCHEDULER"  # sequence batcher: N in backlog


def hold_count(variable: str) -> int:
    """A test hook's N from the environment; 0 (off) when unset or not a number."""
    try:
        return max(0, int(os.environ.get(variable, "0")))
    except ValueError:
        return 0


class WakeTimer:
    """One pending wake-up of a driver task: re-arming replaces the previous one."""

    def __init__(self, wake: asyncio.Event) -> None:
        self._wake = wake
        self._handle: asyncio.TimerHandle | None = None

    def arm(self, wait_until_ns: int | None, now_ns: int) -> None:
        self.cancel()
        if wait_until_ns is not None:
            delay = max(0, wait_until_ns - now_ns) / 1e9
            self._handle = asyncio.get_running_loop().call_later(delay, self._wake.set)

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
