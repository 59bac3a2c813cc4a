"""The event loop every server process runs on."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

__all__ = ["run"]

T = TypeVar("T")


def run(main: Coroutine[Any, Any, T]) -> T:
    """Runs ``main`` on uvloop where it is installed (a dependency outside Windows): grpc.aio
    serves a request for about a fifth less CPU on it (docs/decisions/022-lean-request-path.md)."""
    with asyncio.Runner(loop_factory=_loop_factory()) as runner:
        return runner.run(main)


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - asyncio's own loop works too
        return None
    return uvloop.new_event_loop
