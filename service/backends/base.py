"""The two interfaces every backend implements.

``execute`` is blocking by design: schedulers always call it from an instance's own worker
thread, so a backend never needs to know about the event loop.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy.typing as npt

if TYPE_CHECKING:
    from inference import model_config_pb2 as mc

    from ..repository.completion import ModelSignature

__all__ = ["Array", "Backend", "InstanceSpec", "ModelInstance"]

Array = npt.NDArray[Any]


@dataclass(frozen=True)
class InstanceSpec:
    """Where and how one instance runs, derived from ``instance_group``."""

    name: str
    kind: str  # ModelInstanceGroup.Kind name: KIND_CPU, KIND_GPU, ...
    device_id: int
    threads: int  # intra-op thread budget so that instances do not oversubscribe the cores


class ModelInstance(Protocol):
    spec: InstanceSpec

    def signature(self) -> ModelSignature:
        """The tensors the loaded model file declares (full shapes, -1 for dynamic)."""
        ...

    def execute(self, inputs: Mapping[str, Array], outputs: Sequence[str]) -> dict[str, Array]:
        """Run the model; blocking. ``outputs`` names what to compute, in order."""
        ...

    def close(self) -> None: ...


class Backend(Protocol):
    name: str

    def open(self, config: mc.ModelConfig, version_path: Path, spec: InstanceSpec) -> ModelInstance:
        """Load the version's model file into one instance; raise ValueError with a reason."""
        ...
