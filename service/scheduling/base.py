"""The one interface every scheduler implements, and the unit of work it receives."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import numpy.typing as npt

__all__ = ["Job", "Scheduler"]

Array = npt.NDArray[Any]


@dataclass(slots=True)
class Job:
    """One validated request, ready for a backend: model-side names and shapes."""

    inputs: dict[str, Array]
    outputs: list[str]
    batch_size: int  # 0 for models without a batch dimension
    request_id: str = ""


class Scheduler(Protocol):
    async def submit(self, job: Job) -> dict[str, Array]:
        """Run ``job`` on some instance and return its outputs by name."""
        ...

    @property
    def inflight(self) -> int:
        """Jobs accepted and not yet finished (queued or executing)."""
        ...

    async def stop(self) -> None:
        """Wait for accepted jobs to finish, then release the instances."""
        ...
