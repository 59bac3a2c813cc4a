"""The batching drivers' wake-up timer, precise below a millisecond.

asyncio's timers sleep in ``epoll_wait``, whose timeout counts whole milliseconds, so a
500 us ``max_queue_delay_microseconds`` turns into about 1.1 ms. On Linux the timer is a
``timerfd`` watched by the loop instead: epoll returns when the fd fires, to the
microsecond, at the cost of one ``timerfd_settime`` call per arming. Elsewhere (or when
the loop cannot watch file descriptors) it falls back to ``call_later``.
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import os
import sys
from collections.abc import Callable

__all__ = ["WakeTimer", "precise_timers_available"]

log = logging.getLogger(__name__)

_CLOCK_MONOTONIC = 1  # the clock of time.monotonic_ns on Linux
_TFD_NONBLOCK = os.O_NONBLOCK
_TFD_CLOEXEC = os.O_CLOEXEC


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


def _load_libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        create, settime = libc.timerfd_create, libc.timerfd_settime
    except (OSError, AttributeError):
        return None
    create.argtypes, create.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    settime.argtypes = [
        ctypes.c_int,
        ctypes.c_int,
        ctypes.POINTER(_Itimerspec),
        ctypes.POINTER(_Itimerspec),
    ]
    settime.restype = ctypes.c_int
    return libc


_LIBC = _load_libc()


def precise_timers_available() -> bool:
    return _LIBC is not None


class _TimerFd:
    """One timerfd registered with the running loop; ``set(0)`` disarms it."""

    def __init__(self, loop: asyncio.AbstractEventLoop, fire: Callable[[], None]) -> None:
        assert _LIBC is not None
        fd = _LIBC.timerfd_create(_CLOCK_MONOTONIC, _TFD_NONBLOCK | _TFD_CLOEXEC)
        if fd < 0:
            raise OSError(ctypes.get_errno(), "timerfd_create failed")
        self._fd = fd
        self._loop = loop
        self._fire = fire
        self._spec = _Itimerspec()
        try:
            loop.add_reader(fd, self._on_readable)
        except BaseException:
            os.close(fd)
            raise

    def set(self, delay_ns: int) -> None:
        assert _LIBC is not None
        value = self._spec.it_value
        value.tv_sec, value.tv_nsec = divmod(delay_ns, 1_000_000_000)
        if _LIBC.timerfd_settime(self._fd, 0, ctypes.byref(self._spec), None) < 0:
            raise OSError(ctypes.get_errno(), "timerfd_settime failed")

    def _on_readable(self) -> None:
        try:
            os.read(self._fd, 8)  # the expiration count; reading re-arms readiness
        except BlockingIOError:  # re-armed after it fired: nothing due any more
            return
        self._fire()

    def close(self) -> None:
        self._loop.remove_reader(self._fd)
        os.close(self._fd)


class WakeTimer:
    """One pending wake-up of a driver task: re-arming replaces the previous one."""

    def __init__(self, wake: Callable[[], None]) -> None:
        self._wake = wake
        self._handle: asyncio.Handle | None = None
        self._fd: _TimerFd | None = None
        self._fd_armed = False
        self._precise = _LIBC is not None

    def arm(self, wait_until_ns: int | None, now_ns: int) -> None:
        if wait_until_ns is None:
            self.cancel()
            return
        delay = wait_until_ns - now_ns
        if delay > 0 and self._precise and self._arm_fd(delay):
            self._cancel_handle()
            return
        self.cancel()
        loop = asyncio.get_running_loop()
        if delay <= 0:
            self._handle = loop.call_soon(self._wake)
        else:
            self._handle = loop.call_later(delay / 1e9, self._wake)

    def _arm_fd(self, delay_ns: int) -> bool:
        try:
            if self._fd is None:
                self._fd = _TimerFd(asyncio.get_running_loop(), self._fired)
            self._fd.set(delay_ns)
        except (OSError, NotImplementedError, RuntimeError) as exc:
            log.info("sub-millisecond timers unavailable (%s): using asyncio's", exc)
            self._precise = False
            self._close_fd()
            return False
        self._fd_armed = True
        return True

    def _fired(self) -> None:
        self._fd_armed = False
        self._wake()

    def _cancel_handle(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def cancel(self) -> None:
        self._cancel_handle()
        if self._fd_armed and self._fd is not None:
            self._fd.set(0)
            self._fd_armed = False

    def _close_fd(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            fd.close()
        self._fd_armed = False

    def close(self) -> None:
        """Cancel and release the file descriptor (the driver is going away)."""
        self._cancel_handle()
        self._close_fd()
