"""Calls from instance threads back to the event loop, one loop wake-up per batch.

``loop.call_soon_threadsafe`` writes to the loop's self-pipe on every call, so a thread
that finishes many small executions while the loop is busy would wake it once for each.
A ``Mailbox`` queues the calls and wakes the loop only when its queue was empty: what
arrives before the loop gets round to it rides along on the same wake-up.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["Mailbox", "mailbox_for", "one_per_loop"]

T = TypeVar("T")


class Mailbox:
    __slots__ = ("_calls", "_lock", "loop")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._lock = threading.Lock()
        self._calls: list[tuple[Callable[..., None], tuple[Any, ...]]] = []

    def post(self, call: Callable[..., None], *args: Any) -> None:
        """Run ``call(*args)`` on the loop soon; callable from any thread."""
        with self._lock:
            self._calls.append((call, args))
            if len(self._calls) > 1:
                return  # a drain is already scheduled and will take this one too
        try:
            self.loop.call_soon_threadsafe(self._drain)
        except RuntimeError:  # the loop is closed: nobody is waiting any more
            return

    def _drain(self) -> None:
        with self._lock:
            calls, self._calls = self._calls, []
        for call, args in calls:
            try:
                call(*args)
            except Exception as exc:  # one failing call must not lose the others
                self.loop.call_exception_handler(
                    {"message": "error in a call from an instance thread", "exception": exc}
                )


_mailboxes: dict[asyncio.AbstractEventLoop, Mailbox] = {}


def mailbox_for(loop: asyncio.AbstractEventLoop) -> Mailbox:
    """The one mailbox of ``loop`` (called on the loop's thread)."""
    return one_per_loop(_mailboxes, loop, Mailbox)


def one_per_loop(
    registry: dict[asyncio.AbstractEventLoop, T],
    loop: asyncio.AbstractEventLoop,
    make: Callable[[asyncio.AbstractEventLoop], T],
) -> T:
    """``registry``'s object for ``loop``, made on first use (called on the loop's
    thread); entries of closed loops are dropped then (tests run many loops in one
    process)."""
    found = registry.get(loop)
    if found is None:
        for old in [old for old in registry if old.is_closed()]:
            del registry[old]
        found = registry[loop] = make(loop)
    return found
