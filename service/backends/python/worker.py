"""The server's handle on one worker process: spawn, control calls, a reader thread, reaping.

The worker is started by ``spawn_worker`` (a fresh interpreter, one end of a socketpair).
Replies to control calls (load, initialize, finalize) are handed to the caller waiting in
``call``; everything else (responses, "executed", cancellation queries) goes to the
``on_message`` callback, on the reader thread. When the worker dies the reader reaps it and
calls ``on_exit`` with a description of how it ended.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import select
import subprocess
import threading
from collections.abc import Callable, Sequence
from typing import Any

from ..spawn import describe_exit, spawn_worker
from .protocol import Channel, ChannelClosed
from .shm import MIN_REGION

__all__ = ["WorkerDied", "WorkerProcess"]

log = logging.getLogger(__name__)

_CONTROL_REPLIES = {"ready", "loaded", "initialized", "failed", "finalized"}

OnMessage = Callable[[tuple[Any, ...], int | None], None]
OnExit = Callable[[str], None]


class WorkerDied(RuntimeError):
    """The worker ended while a control call waited for it."""


class WorkerProcess:
    def __init__(
        self,
        on_message: OnMessage,
        on_exit: OnExit,
        inline_limit: int,
        pool_bytes: int,
        regions: tuple[int, int] = (MIN_REGION, 0),
        python: Sequence[str] = (),
    ) -> None:
        """``regions``: the smallest shared-memory region and the growth step (0: powers
        of two), in both directions."""
        self._on_message = on_message
        self._on_exit = on_exit
        self._replies: queue.Queue[tuple[Any, ...] | None] = queue.Queue()
        self._exit_reason = ""
        self.process, ours = spawn_worker(
            "service.backends.python.stub",
            str(inline_limit),
            str(pool_bytes),
            *(str(r) for r in regions),
            python=python,
        )
        self.pid = self.process.pid
        self.channel = Channel(ours, inline_limit, pool_bytes, *regions)
        self._reader = threading.Thread(
            target=self._read, name=f"python-worker-{self.pid}", daemon=True
        )
        self._reader.start()

    @property
    def alive(self) -> bool:
        return self._reader.is_alive()

    def send(self, message: tuple[Any, ...], fd: int | None = None) -> None:
        self.channel.send(message, fd)

    def call(self, message: tuple[Any, ...] | None, expect: str, timeout: float | None) -> Any:
        """Send a control message (None: only wait) and return the reply's fields."""
        if message is not None:
            with contextlib.suppress(OSError):  # the reader reports the exit below
                self.send(message)
        try:
            reply = self._replies.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError(f"no '{expect}' reply within {timeout:g} s") from None
        if reply is None:
            raise WorkerDied(f"the worker process {self._exit_reason}")
        if reply[0] == "failed":
            raise RuntimeError(reply[1])
        if reply[0] != expect:
            raise RuntimeError(f"unexpected reply '{reply[0]}' from the worker, wanted '{expect}'")
        return reply[1:]

    def kill(self) -> None:
        """SIGKILL the worker and wait until the reader has reported its end."""
        with contextlib.suppress(OSError):
            self.process.kill()
        self.join()

    def stop(self, timeout: float) -> None:
        """Ask for finalize and a clean exit; kill when it takes longer than ``timeout``."""
        if self.alive:
            try:
                self.call(("finalize",), "finalized", timeout)
                self.process.wait(timeout=timeout)
            except (TimeoutError, WorkerDied, RuntimeError, subprocess.TimeoutExpired):
                log.warning(
                    "python worker %d did not finish in %g s; killing it", self.pid, timeout
                )
        self.kill()

    def join(self) -> None:
        if threading.current_thread() is not self._reader:
            self._reader.join()

    def _read(self) -> None:
        try:
            while True:
                if not self._wait_readable():
                    break
                message, fd = self.channel.recv()
                if message[0] in _CONTROL_REPLIES:
                    self._replies.put(message)
                else:
                    self._on_message(message, fd)
        except (ChannelClosed, OSError):
            pass
        except Exception:
            log.exception("python worker %d: reader failed", self.pid)
        self._exit_reason = self._reap()
        self.channel.close()
        self._replies.put(None)
        self._on_exit(self._exit_reason)

    def _wait_readable(self) -> bool:
        """Block until a message starts; False once the process is gone but the socket is
        still held open (a model that forked children keeps a copy of the worker's end)."""
        while True:
            ready, _, _ = select.select([self.channel.sock], [], [], 1.0)
            if ready:
                return True
            if self.process.poll() is not None:
                return False

    def _reap(self) -> str:
        try:
            code = self.process.wait(timeout=5.0)
        except subprocess.TimeoutExpired:
            self.process.kill()
            code = self.process.wait()
        return describe_exit(code)
