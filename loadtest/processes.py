"""The processes a benchmark starts from this checkout: the service, the gateway and the
bare servicer, each ready once its start-up line names the port it bound (port 0: no
race for a free port), built on the tests' ``LoggedProcess`` so both start them alike.

The service's interpreter is SERVICE_PYTHON when set (as in the tests and on a GPU
machine), else the one running the benchmark.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path

from server_process import LoggedProcess

__all__ = ["SERVICE_PY", "bare_servicer", "engine_pid", "gateway", "service"]

SERVICE_PY = os.environ.get("SERVICE_PYTHON", sys.executable)
_ENGINE = re.compile(r"engine started \(pid (\d+)\)")


def service(repository: Path, *extra: str, python: str = SERVICE_PY) -> LoggedProcess:
    """``python -m service`` on 127.0.0.1, port 0; ``extra`` are its flags (none: its
    default layout, one frontend per core). Not started."""
    args = [python, "-m", "service", "--grpc-address", "127.0.0.1", "--grpc-port", "0"]
    proc = LoggedProcess([*args, "--model-repository", str(repository), *extra])
    proc.name = "service"
    return proc


def engine_pid(proc: LoggedProcess) -> int | None:
    """The engine process of a split server (``--frontends N``, N > 0), from its log: the
    one place every request passes, so its loop thread is the first suspect."""
    found = _ENGINE.search(proc.log)
    return int(found.group(1)) if found else None


class _Gateway(LoggedProcess):
    name = "gateway"
    started = re.compile(r"Started HTTPService at [^\s:]+:(\d+)")


def gateway(
    target: str, workers: int = 1, local_socket: str = "", python: str = SERVICE_PY
) -> LoggedProcess:
    """``python -m gateway`` in front of ``target``; ``local_socket``: the service's
    ``--grpc-local-socket``, as scripts/serve.sh runs them. Not started."""
    args: Sequence[str] = [
        *(python, "-m", "gateway", "--grpc-target", target),
        *("--http-address", "127.0.0.1", "--http-port", "0", "--workers", str(workers)),
        *(("--grpc-local-socket", local_socket) if local_socket else ()),
    ]
    return _Gateway(args)


def bare_servicer(label: str, *flags: str) -> LoggedProcess:
    """``python -m loadtest bare-servicer`` (the yardstick of cpu-bench) on port 0."""
    args = [SERVICE_PY, "-m", "loadtest", "bare-servicer", "--grpc-port", "0", *flags]
    proc = LoggedProcess(args)
    proc.name = f"{label} servicer"
    return proc
