"""The processes a benchmark starts from this checkout (the service and the bare
servicer), each ready once its start-up line names the port it bound (port 0: no race for
a free port), built on the tests' ``LoggedProcess``. The service's interpreter is
SERVICE_PYTHON when set (as in the tests and on a GPU machine)."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

from server_process import LoggedProcess

SERVICE_PY = os.environ.get("SERVICE_PYTHON", sys.executable)
_ENGINE = re.compile(r"engine started \(pid (\d+)\)")


def _named(name: str, args: list[str]) -> LoggedProcess:
    proc = LoggedProcess(args)
    proc.name = name
    return proc


def service(repository: Path, *extra: str) -> LoggedProcess:
    """``python -m service`` on 127.0.0.1, port 0, with flags ``extra``. Not started."""
    args = [SERVICE_PY, "-m", "service", "--grpc-address", "127.0.0.1", "--grpc-port", "0"]
    return _named("service", [*args, "--model-repository", str(repository), *extra])


def engine_pid(proc: LoggedProcess) -> int | None:
    """The engine process of a split server (``--frontends N``, N > 0), from its log: the
    one place every request passes, so its loop thread is the first suspect."""
    found = _ENGINE.search(proc.log)
    return int(found.group(1)) if found else None


def bare_servicer(label: str, *flags: str) -> LoggedProcess:
    """``python -m loadtest bare-servicer`` (the yardstick of cpu-bench) on port 0."""
    args = [SERVICE_PY, "-m", "loadtest", "bare-servicer", "--grpc-port", "0", *flags]
    return _named(f"{label} servicer", args)
