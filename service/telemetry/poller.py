"""The polling thread shared by the per-interval metrics (GPU through NVML, CPU from /proc).

Their sources block (a driver call, a file read), and a scrape runs on the event loop, so
a daemon thread reads them every ``--metrics-interval-ms`` and a scrape renders the last
snapshot. Daemon, and joined only briefly on stop: a source that hangs cannot hold the
exit.
"""

from __future__ import annotations

import logging
import threading
from abc import ABC, abstractmethod

__all__ = ["IntervalPoller"]

log = logging.getLogger(__name__)


class IntervalPoller(ABC):
    """Calls ``poll_once`` every ``interval_s`` in a daemon thread until stopped.

    ``poll_once`` must publish its snapshot with one reference swap, so a scrape on
    another thread always sees a whole one without a lock.
    """

    def __init__(self, interval_s: float, name: str) -> None:
        self._interval_s = interval_s
        self._name = name  # thread name, and what a failed poll's log line names
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @abstractmethod
    def poll_once(self) -> None:
        """Take one reading and publish it."""

    def _start_polling(self) -> None:
        self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
        self._thread.start()

    def _stop_polling(self) -> bool:
        """Stop the thread; False when a poll is still stuck after the wait (the source
        must then be left to the process exit)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=max(1.0, self._interval_s))
            if self._thread.is_alive():
                return False
            self._thread = None
        return True

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            try:
                self.poll_once()
            except Exception:
                log.exception("%s poll failed", self._name)
