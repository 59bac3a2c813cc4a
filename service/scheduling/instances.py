"""Model instances, each with its own worker thread, and the pool that hands them out.

One thread per instance keeps an instance's executions strictly serial (sessions are not
shared between threads) while instances run in parallel; the event loop never blocks.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from ..backends.base import ModelInstance, RequestInstance
from ..statistics import BatchTimings
from .base import Job
from .batch import JobOutputs, execute_batch

__all__ = ["InstancePool", "InstanceWorker"]

T = TypeVar("T")


class InstanceWorker:
    def __init__(self, instance: ModelInstance | RequestInstance, index: int = 0) -> None:
        self.instance = instance
        self.index = index
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=instance.spec.name)

    def call(self, work: Callable[[ModelInstance | RequestInstance], T]) -> asyncio.Future[T]:
        """Start ``work(instance)`` in this instance's thread now.

        Submitting here, not from a task that starts on a later loop iteration, keeps the
        instance busy: a batch finishing wakes dozens of handlers, and the next batch must
        not wait until all of them have sent their responses."""
        loop = asyncio.get_running_loop()
        return loop.run_in_executor(self._executor, work, self.instance)

    def close(self) -> None:
        self._executor.shutdown(wait=True)
        self.instance.close()


class InstancePool:
    """Free instances in FIFO order: request N+1 waits for the first one released."""

    def __init__(self, workers: Sequence[InstanceWorker]) -> None:
        self.workers = list(workers)
        for index, worker in enumerate(self.workers):
            worker.index = index
        self._free: deque[InstanceWorker] = deque(self.workers)
        self._waiters: deque[asyncio.Future[InstanceWorker]] = deque()
        self._listeners: list[Callable[[], None]] = []

    def on_release(self, listener: Callable[[], None]) -> None:
        self._listeners.append(listener)

    @property
    def has_free(self) -> bool:
        return bool(self._free)

    def is_free(self, index: int) -> bool:
        return self.workers[index] in self._free

    async def acquire(self) -> InstanceWorker:
        if self._free and not self._waiters:
            return self._free.popleft()
        waiter: asyncio.Future[InstanceWorker] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            return await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release(waiter.result())  # handed over just as the caller left
            raise

    def try_acquire(self) -> InstanceWorker | None:
        return self._free.popleft() if self._free else None

    def take(self, index: int) -> InstanceWorker | None:
        """Acquire one particular instance (sequence affinity), if it is free."""
        worker = self.workers[index]
        if worker not in self._free:
            return None
        self._free.remove(worker)
        return worker

    def release(self, worker: InstanceWorker) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(worker)
                break
        else:
            self._free.append(worker)
        for listener in self._listeners:
            listener()

    def launch(
        self, worker: InstanceWorker, work: Callable[[ModelInstance | RequestInstance], T]
    ) -> asyncio.Future[T]:
        """Start ``work`` on an acquired worker; the worker returns to the pool when its
        thread is done, even if every caller has gone away meanwhile."""
        execution = worker.call(work)
        execution.add_done_callback(lambda _: self.release(worker))
        return execution

    def launch_jobs(
        self, worker: InstanceWorker, jobs: Sequence[Job]
    ) -> asyncio.Future[tuple[list[JobOutputs], BatchTimings]]:
        return self.launch(worker, lambda instance: execute_batch(instance, jobs))

    async def aclose(self) -> None:
        """Wait for running executions and free the instances, off the event loop."""
        await asyncio.to_thread(self.close)

    def close(self) -> None:
        for worker in self.workers:
            worker.close()
