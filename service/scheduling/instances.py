"""Model instances, each with its own worker thread, and the pool that hands them out.

One thread per instance keeps an instance's executions strictly serial (sessions are not
shared between threads) while instances run in parallel; the event loop never blocks.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from ..backends.base import ModelInstance
from .base import Array

__all__ = ["InstancePool", "InstanceWorker"]


class InstanceWorker:
    def __init__(self, instance: ModelInstance) -> None:
        self.instance = instance
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=instance.spec.name)

    async def run(self, inputs: dict[str, Array], outputs: Sequence[str]) -> dict[str, Array]:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self.instance.execute, inputs, outputs)

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

    async def run(self, inputs: dict[str, Array], outputs: Sequence[str]) -> dict[str, Array]:
        """Execute on the next free instance.

        The execution is shielded: a caller that goes away does not free the instance while
        its thread still runs; the instance returns to the pool when the thread is done.
        """
        worker = await self._free.get()
        task = asyncio.ensure_future(worker.run(inputs, outputs))
        task.add_done_callback(lambda _: self._free.put_nowait(worker))
        return await asyncio.shield(task)

    def close(self) -> None:
        for worker in self.workers:
            worker.close()
