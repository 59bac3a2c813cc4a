"""Model instances, each with its own worker thread, and the pool that hands them out.

One thread per instance keeps an instance's executions strictly serial (sessions are not
shared between threads) while instances run in parallel; the event loop never blocks.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

from ..backends.base import ModelInstance
from ..statistics import BatchTimings
from .base import Array, Job
from .batch import execute_batch

__all__ = ["InstancePool", "InstanceWorker"]


class InstanceWorker:
    def __init__(self, instance: ModelInstance) -> None:
        self.instance = instance
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=instance.spec.name)

    async def run(self, jobs: Sequence[Job]) -> tuple[list[dict[str, Array]], BatchTimings]:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, execute_batch, self.instance, jobs)

    def close(self) -> None:
        self._executor.shutdown(wait=True)
        self.instance.close()


class InstancePool:
    """Free instances in a FIFO queue: request N+1 waits for the first one released."""

    def __init__(self, workers: Sequence[InstanceWorker]) -> None:
        self.workers = list(workers)
        self._free: asyncio.Queue[InstanceWorker] = asyncio.Queue()
        for worker in self.workers:
            self._free.put_nowait(worker)
        self._listeners: list[Callable[[], None]] = []

    def on_release(self, listener: Callable[[], None]) -> None:
        self._listeners.append(listener)

    @property
    def has_free(self) -> bool:
        return not self._free.empty()

    async def acquire(self) -> InstanceWorker:
        return await self._free.get()

    def try_acquire(self) -> InstanceWorker | None:
        try:
            return self._free.get_nowait()
        except asyncio.QueueEmpty:
            return None

    def release(self, worker: InstanceWorker) -> None:
        self._free.put_nowait(worker)
        for listener in self._listeners:
            listener()

    def launch(
        self, worker: InstanceWorker, jobs: Sequence[Job]
    ) -> asyncio.Future[tuple[list[dict[str, Array]], BatchTimings]]:
        """Start ``jobs`` on an acquired worker; the worker returns to the pool when its
        thread is done, even if every caller has gone away meanwhile."""
        task = asyncio.ensure_future(worker.run(jobs))
        task.add_done_callback(lambda _: self.release(worker))
        return task

    async def aclose(self) -> None:
        """Wait for running executions and free the instances, off the event loop."""
        await asyncio.to_thread(self.close)

    def close(self) -> None:
        for worker in self.workers:
            worker.close()
