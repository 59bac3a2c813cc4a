"""Starting a worker process of the server: fork+exec of the server's interpreter.

A worker is never a bare fork of the threaded server: ``subprocess`` runs a fresh
interpreter on ``python -m MODULE FD ...`` and hands it one end of a socketpair. The
server's end is not inheritable, so the worker sees end-of-stream as soon as the server
exits, however it exits. The worker gets a session of its own: terminal signals go to
the server, which stops its workers itself.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import wire

__all__ = ["describe_exit", "spawn_linked", "spawn_worker"]

_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])  # the folder holding 'service'
_WIRE_ROOT = str(Path(wire.__file__).resolve().parents[1])  # the folder holding 'wire'


def spawn_worker(
    module: str, *args: str, python: Sequence[str] = ()
) -> tuple[subprocess.Popen[bytes], socket.socket]:
    """Start ``python -m module FD *args``; returns the process and the server's end.
    ``python``: the command that runs another interpreter (a model's own environment)."""
    process, (ours,) = spawn_linked(module, 1, *args, python=python)
    return process, ours


def spawn_linked(
    module: str, links: int, *args: str, python: Sequence[str] = ()
) -> tuple[subprocess.Popen[bytes], list[socket.socket]]:
    """``spawn_worker`` with ``links`` socketpairs: the worker gets ``FD1,FD2,...`` as
    its first argument, the server the matching ends, in order."""
    pairs = [socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM) for _ in range(links)]
    ours = [pair[0] for pair in pairs]
    theirs = [pair[1] for pair in pairs]
    env = dict(os.environ)
    paths = (_PACKAGE_ROOT, _WIRE_ROOT, env.get("PYTHONPATH"))
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(p for p in paths if p))
    fds = [sock.fileno() for sock in theirs]
    try:
        process = subprocess.Popen(
            [*(python or [sys.executable]), "-m", module, ",".join(map(str, fds)), *args],
            pass_fds=fds,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )
    except BaseException:
        for sock in ours:
            sock.close()
        raise
    finally:
        for sock in theirs:
            sock.close()
    return process, ours


def describe_exit(code: int) -> str:
    """How a worker ended, from its exit status: "was killed by signal SIGKILL", say."""
    if code < 0:
        try:
            return f"was killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"
