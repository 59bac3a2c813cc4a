"""``python -m service``: parse flags, set up logging, run until SIGTERM/SIGINT."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable

from .app import serve
from .config import parse_args
from .telemetry.logs import LogControl


def main() -> int:
    config = parse_args()
    try:
        logs = LogControl(config.log)
    except OSError as exc:  # --log-file in a folder that does not exist, or not writable
        print(f"error: cannot open log file: {exc}", file=sys.stderr)
        return 1
    try:
        with asyncio.Runner(loop_factory=_loop_factory()) as runner:
            return runner.run(serve(config, logs))
    finally:
        logs.close()


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop where it is installed (a dependency outside Windows): grpc.aio serves a
    request for about a fifth less CPU on it (docs/decisions.md, "Lean request path")."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - asyncio's own loop works too
        return None
    return uvloop.new_event_loop


if __name__ == "__main__":
    sys.exit(main())
