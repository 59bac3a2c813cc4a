"""``python -m service``: parse flags, set up logging, run until SIGTERM/SIGINT."""

from __future__ import annotations

import sys

from wire.heap import reuse_freed_pages

from . import loop
from .app import serve
from .config import parse_args
from .supervisor import supervise
from .telemetry.logs import LogControl


def main() -> int:
    config = parse_args()
    refusal = config.backends.refusal()
    if refusal is not None:  # Triton refuses these --backend-config values at start
        print(f"error: creating server: Invalid argument - {refusal}", file=sys.stderr)
        return 1
    try:
        logs = LogControl(config.log)
    except OSError as exc:  # --log-file in a folder that does not exist, or not writable
        print(f"error: cannot open log file: {exc}", file=sys.stderr)
        return 1
    try:
        if config.frontends:
            return supervise(config)
        reuse_freed_pages()
        return loop.run(serve(config, logs))
    finally:
        logs.close()


if __name__ == "__main__":
    sys.exit(main())
