"""The server's handle on one worker process: spawn, control calls, a reader thread, reaping.

The worker is started by ``spawn_linked`` (a fresh interpreter, two socketpairs). On the
calls link the server sends commands (load, initialize, execute, finalize) and the thread
that sent one reads its answer itself (``call``, ``recv_call``): no other thread wakes for
it. The services link carries everything else (BLS, model control, metrics,
cancellation queries, a decoupled model's responses), read by the reader thread, which
hands each message to ``on_message``. When the worker dies the reader reaps it and calls
``on_exit`` with a description of how it ended.
"""

from __future__ import annotations

import contextlib
import logging
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from ..spawn import describe_exit, spawn_linked
from .protocol import Channel, ChannelClosed
from .shm import MIN_REGION

__all__ = ["ModelRaised", "WorkerDied", "WorkerProcess"]

log = logging.getLogger(__name__)

_CONTROL_REPLIES = {"ready", "loaded", "initialized", "failed", "finalized"}

OnMessage = Callable[[tuple[Any, ...], int | None], None]
OnExit = Callable[[str], None]


class ModelRaised(RuntimeError):
    """The model's own code raised in the worker (its ``failed`` reply): the text is the
    one Triton's stub gives (``stub_runtime.describe_exception``)."""


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
        self._exit_reason = ""
        self._calls_lock = threading.Lock()  # one reader of the calls link at a time
        self.process, (calls, services) = spawn_linked(
            "service.backends.python.stub",
            2,
            str(inline_limit),
            str(pool_bytes),
            *(str(r) for r in regions),
            python=python,
        )
        self.pid = self.process.pid
        self.calls = Channel(calls, inline_limit, pool_bytes, *regions)
        self.channel = self.calls.sibling(services)
        self._reader = threading.Thread(
            target=self._read, name=f"python-worker-{self.pid}", daemon=True
        )
        self._reader.start()

    @property
    def alive(self) -> bool:
        return self._reader.is_alive()

    def send(self, message: tuple[Any, ...], fd: int | None = None) -> None:
        """On the services link (answers to the worker's own calls)."""
        self.channel.send(message, fd)

    def send_call(self, message: tuple[Any, ...], fd: int | None = None) -> None:
        """A command on the calls link; its sender reads the answer (``recv_call``)."""
        self.calls.send(message, fd)

    def call(self, message: tuple[Any, ...] | None, expect: str, timeout: float | None) -> Any:
        """Send a control message (None: only wait) and return the reply's fields.
        Anything else read meanwhile (a late response) goes to ``on_message``."""
        deadline = None if timeout is None else time.monotonic() + timeout
        if not self._calls_lock.acquire(timeout=-1 if timeout is None else timeout):
            raise TimeoutError(f"no '{expect}' reply within {timeout:g} s")
        try:
            if message is not None:
                with contextlib.suppress(OSError):  # the reply's wait reports the exit
                    self.send_call(message)
            while True:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise TimeoutError(f"no '{expect}' reply within {timeout:g} s")
                try:
                    received = self._recv_call_locked(left)
                except (ChannelClosed, OSError):
                    self.join()
                    raise WorkerDied(f"the worker process {self._exit_reason}") from None
                if received is None:
                    continue
                reply, fd = received
                if reply[0] not in _CONTROL_REPLIES:
                    self._on_message(reply, fd)
                    continue
                if reply[0] == "failed":
                    raise ModelRaised(reply[1])
                if reply[0] != expect:
                    raise RuntimeError(
                        f"unexpected reply '{reply[0]}' from the worker, wanted '{expect}'"
                    )
                return reply[1:]
        finally:
            self._calls_lock.release()

    def recv_call(self, timeout: float | None) -> tuple[tuple[Any, ...], int | None] | None:
        """The next message on the calls link, or None after ``timeout`` (at most a
        second, so that a worker gone while its socket is held open is noticed). Raises
        ChannelClosed (or OSError) once the worker is gone."""
        with self._calls_lock:
            return self._recv_call_locked(timeout)

    def _recv_call_locked(self, timeout: float | None) -> tuple[tuple[Any, ...], int | None] | None:
        """``Channel.recv_within`` (one system call per answer); a bound that ran out
        while the reader has already reported the worker's end is that end."""
        received = self.calls.recv_within(timeout)
        if received is None and not self.alive:
            raise ChannelClosed("the worker is gone")
        return received

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
        """Until the reader has reported the worker's end; then the calls link closes."""
        if threading.current_thread() is not self._reader:
            self._reader.join()
            self.calls.close_link()

    def _read(self) -> None:
        try:
            while True:
                received = self.channel.recv_within(None)
                if received is None:
                    # a second without a message: is the process gone while its end is
                    # still held open (a model that forked children keeps a copy)?
                    if self.process.poll() is not None:
                        break
                    continue
                self._on_message(*received)
        except (ChannelClosed, OSError):
            pass
        except Exception:
            log.exception("python worker %d: reader failed", self.pid)
        self._exit_reason = self._reap()
        self.channel.close()
        self.calls.shutdown()  # whoever reads the calls link sees its end
        self._on_exit(self._exit_reason)

    def _reap(self) -> str:
        try:
            code = self.process.wait(timeout=5.0)
        except subprocess.TimeoutExpired:
            self.process.kill()
            code = self.process.wait()
        return describe_exit(code)
