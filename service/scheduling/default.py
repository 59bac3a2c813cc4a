"""The default scheduler: each request goes to the next free instance, unbatched."""

from __future__ import annotations

from .base import Array, Job
from .instances import InstancePool

__all__ = ["DefaultScheduler"]


class DefaultScheduler:
    def __init__(self, pool: InstancePool) -> None:
        self._pool = pool
        self._inflight = 0

    @property
    def inflight(self) -> int:
        return self._inflight

    async def submit(self, job: Job) -> dict[str, Array]:
        self._inflight += 1
        try:
            return await self._pool.run(job.inputs, job.outputs)
        finally:
            self._inflight -= 1

    async def stop(self) -> None:
        self._pool.close()
