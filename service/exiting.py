"""How a server process ends once its stop has run (every layout: app.py, the engine,
the frontends).

Not through grpc's own shutdown while calls may still arrive: it cancels the calls it
has received but not yet handed to a servicer, a bare CANCELLED to callers that sent at
the last moment, which Triton's clients do not retry. Every answer owed has gone out
before (``finish``); then, where the connections have fallen quiet, grpc's stop sends
GOAWAY on each, as Triton's does (``grpc_frontend/goaway.py``); else the process ends
and closes them, and their callers see UNAVAILABLE.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import NoReturn

__all__ = ["EXIT_TIMEOUT_EXPIRED", "exit_timeout_expired", "leave"]

log = logging.getLogger("service")

#: Triton's line when --exit-timeout-secs is spent with work left.
EXIT_TIMEOUT_EXPIRED = (
    "failed to stop server: Internal - Exit timeout expired. Exiting immediately."
)


def leave(code: int) -> NoReturn:
    """End the process now, logs flushed, with its connections still open until the
    kernel closes them."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def exit_timeout_expired() -> NoReturn:
    """Work is left after --exit-timeout-secs: leave at once with exit code 1, logging
    what Triton logs. Waiting would outlast the timeout (interpreter exit joins the model
    threads still executing), so no further clean-up runs."""
    log.error("%s", EXIT_TIMEOUT_EXPIRED)
    leave(1)
