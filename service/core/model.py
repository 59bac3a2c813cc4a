"""A loaded model version: its completed config, tensor specs, state and scheduler."""

from __future__ import annotations

import asyncio
import enum
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from inference import model_config_pb2 as mc
from wire import datatypes

from ..repository.layout import ModelDirectory
from ..scheduling.base import Scheduler
from ..statistics import ModelStats
from ..types import TensorSpec

if TYPE_CHECKING:
    from ..backends.base import Backend
    from ..scheduling.instances import InstancePool, InstanceWorker

__all__ = ["IOSpec", "ModelEntry", "ModelState", "ModelVersion", "io_specs"]


_GENERATIONS = itertools.count(1)


class ModelState(enum.Enum):
    UNKNOWN = "UNKNOWN"
    LOADING = "LOADING"
    READY = "READY"
    UNLOADING = "UNLOADING"
    UNAVAILABLE = "UNAVAILABLE"


@dataclass(frozen=True, slots=True)
class IOSpec:
    """A configured tensor. ``dims`` exclude the batch dimension, as in config.pbtxt."""

    name: str
    datatype: str
    dims: tuple[int, ...]
    reshape: tuple[int, ...] | None  # the shape the model itself sees, when it differs
    optional: bool = False

    def full_shape(self, batched: bool) -> tuple[int, ...]:
        return ((-1,) if batched else ()) + self.dims


def io_specs(tensors: list[mc.ModelInput] | list[mc.ModelOutput]) -> dict[str, IOSpec]:
    specs = {}
    for tensor in tensors:
        reshape = tuple(tensor.reshape.shape) if tensor.HasField("reshape") else None
        specs[tensor.name] = IOSpec(
            name=tensor.name,
            datatype=datatypes.datatype_from_config(mc.DataType.Name(tensor.data_type)),
            dims=tuple(tensor.dims),
            reshape=reshape,
            optional=bool(getattr(tensor, "optional", False)),
        )
    return specs


class _Lease:
    """``with model.lease():`` counts the request; one reusable object per version, since
    a generator-based context manager costs a microsecond or more per request."""

    __slots__ = ("_model",)

    def __init__(self, model: ModelVersion) -> None:
        self._model = model

    def __enter__(self) -> None:
        self._model.leases += 1

    def __exit__(self, *exc: object) -> None:
        model = self._model
        model.leases -= 1
        if not model.leases and model._unleased is not None:
            model._unleased.set()


@dataclass
class ModelVersion:
    name: str
    version: int
    config: mc.ModelConfig
    state: ModelState = ModelState.UNKNOWN
    reason: str = ""
    scheduler: Scheduler | None = None
    inputs: dict[str, IOSpec] = field(default_factory=dict)
    outputs: dict[str, IOSpec] = field(default_factory=dict)
    stats: ModelStats = field(default_factory=ModelStats)
    # Classification labels by output name (core/labels.py), read at load time.
    labels: dict[str, tuple[str, ...]] = field(default_factory=dict)
    leases: int = 0  # requests that picked this version and have not finished
    # Tells this load of the version from any other (a reload makes a new one): what a
    # frontend validated a request against (core/checked.py).
    generation: int = field(default_factory=lambda: next(_GENERATIONS))
    # Its repository, with --model-namespacing ('' without): Triton's ``namespace``
    # metrics label.
    namespace: str = ""
    # What an instance-group update (core/instance_update.py) builds on: the pool of
    # instances, the backend that opened them, the model file's own tensor shapes.
    pool: InstancePool | None = field(default=None, repr=False)
    backend: Backend | None = field(default=None, repr=False)
    declared: Mapping[str, Sequence[int]] = field(default_factory=dict, repr=False)
    # Such an update's instances taken from the serving version, (its worker, ours),
    # until it is swapped in (instance_update.hand_over); how many it let go.
    carried: list[tuple[InstanceWorker, InstanceWorker]] = field(default_factory=list, repr=False)
    removed: int = 0
    _unleased: asyncio.Event | None = field(default=None, repr=False)
    _lease: _Lease | None = field(default=None, repr=False, compare=False)
    #: The config's ``model_transaction_policy.decoupled`` as the first request read it
    #: (None before): two protobuf attribute reads cost the loop's thread a microsecond
    #: per request. Not read at construction: the first instance's auto-complete may
    #: still set it then; a version serves requests only once its config is final.
    decoupled: bool | None = field(default=None, repr=False, compare=False)

    def lease(self) -> _Lease:
        """Held by a request from the moment it picks this version until it is answered,
        so that a reload or unload retires the version only after every such request."""
        lease = self._lease
        if lease is None:
            lease = self._lease = _Lease(self)
        return lease

    async def wait_unleased(self) -> None:
        while self.leases:
            self._unleased = asyncio.Event()
            await self._unleased.wait()

    @property
    def ready(self) -> bool:
        return self.state is ModelState.READY and self.scheduler is not None

    @property
    def batched(self) -> bool:
        return self.config.max_batch_size > 0

    def metadata_inputs(self) -> list[TensorSpec]:
        return [
            TensorSpec(s.name, s.datatype, s.full_shape(self.batched)) for s in self.inputs.values()
        ]

    def metadata_outputs(self) -> list[TensorSpec]:
        return [
            TensorSpec(s.name, s.datatype, s.full_shape(self.batched))
            for s in self.outputs.values()
        ]


@dataclass
class ModelEntry:
    """A model name and its versions; ``reason`` is set when the model as a whole failed."""

    name: str
    directory: ModelDirectory
    versions: dict[int, ModelVersion] = field(default_factory=dict)
    reason: str = ""
    fingerprint: tuple[tuple[str, int, int], ...] = ()
    staged: bool = False  # loaded from files sent with the load request
    # No version to load under the version policy: Triton knows the model but has no
    # version of it (a load failure, not a poll failure; left out of the index).
    versionless: bool = False
    # An ensemble's steps with --model-namespacing: the namespace each composing model
    # name resolved to when it was built (None: none, or ambiguous), to rebuild it when
    # that changes (Triton's dependency graph reconnects it). None: not an ensemble.
    steps: dict[str, str | None] | None = None
    # ...and such an ensemble's steps do not all resolve: a load failure (its reason),
    # not a poll failure.
    unlinked: bool = False
    override: mc.ModelConfig | None = None  # the config the load request gave, if any
    # Triton's explicitly_load_: loaded by name (a load request, --load-model, or any
    # model where the mode loads them all), not only as an ensemble's composing model.
    # An unload with unload_dependents takes along the composing models not so loaded.
    explicit: bool = True
    # The names of the models an ensemble's steps call (() for other models).
    calls: tuple[str, ...] = ()
    # The config it was loaded from (before auto-completion), and whether its versions
    # were made by updating the serving ones' instances in place (core/instance_update).
    config: mc.ModelConfig | None = None
    in_place: bool = False

    @property
    def key(self) -> str:
        return self.directory.key

    def ready_versions(self) -> list[int]:
        return sorted(v for v, m in self.versions.items() if m.ready)

    @property
    def failure(self) -> str:
        """Why this entry cannot serve as a whole ('' when every version is ready)."""
        if self.reason:
            return self.reason
        return "; ".join(
            f"version {v}: {m.reason}" for v, m in sorted(self.versions.items()) if not m.ready
        )
