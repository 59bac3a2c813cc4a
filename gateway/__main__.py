"""``python -m gateway``: parse flags, then serve (``server.py``) or, with ``--workers N``
greater than 1, supervise N serving processes on one port (``workers.py``)."""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Sequence

from wire.heap import reuse_freed_pages

from .config import parse_args

#: With grpc's EventEngine client, a blocking call's answer is read by another thread and
#: handed over; without it the calling thread reads it itself, one thread wake-up less
#: per request (docs/decisions/015-gateway-http-layer.md). A value set by the user wins.
GRPC_EXPERIMENTS = "-event_engine_client"


class _TritonLayout(logging.Formatter):
    """``I1121 12:34:56.789012 4242 __main__.py:60] message``: Triton's (and the service's)
    log layout, so the two processes' logs read alike."""

    def format(self, record: logging.LogRecord) -> str:
        letter = {"WARNING": "W", "ERROR": "E", "CRITICAL": "E"}.get(record.levelname, "I")
        stamp = time.strftime("%m%d %H:%M:%S", time.gmtime(record.created))
        micros = int((record.created % 1) * 1_000_000)
        where = f"{record.process} {record.filename}:{record.lineno}]"
        text = f"{letter}{stamp}.{micros:06d} {where} {record.getMessage()}"
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        return text


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    config = parse_args(args)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_TritonLayout())
    logging.basicConfig(
        level=logging.DEBUG if config.log_verbose > 0 else logging.INFO, handlers=[handler]
    )
    from .workers import WorkerLink, supervise

    reuse_freed_pages()
    worker = WorkerLink.from_env()
    if worker is None and config.workers > 1:
        return supervise(config, args)
    os.environ.setdefault("GRPC_EXPERIMENTS", GRPC_EXPERIMENTS)  # before grpc is imported
    from .server import serve

    return serve(config, worker)


if __name__ == "__main__":
    code = main()
    logging.shutdown()
    # Connection threads may still wait in a read; they must not hold (or crash) the exit.
    os._exit(code)
