"""The interfaces backends implement.

Tensor backends (ONNX Runtime) implement ``ModelInstance.execute`` on merged batches.
Request backends (Python models, the built-in utility backends) implement
``RequestInstance.execute_requests``: they see the list of requests, as Triton's
``execute(requests)`` does, and answer each through its ``ResponseSender`` (one final
response, or for decoupled models zero or more responses and a final flag).

Both calls are blocking by design: schedulers always call them from an instance's own
worker thread, so a backend never needs to know about the event loop.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from wire.datatypes import Array

if TYPE_CHECKING:
    from inference import model_config_pb2 as mc

    from ..errors import ServerError
    from ..repository.completion import ModelSignature

__all__ = [
    "Answer",
    "Array",
    "Backend",
    "BackendRequest",
    "InstanceSpec",
    "ModelInstance",
    "RequestInstance",
    "ResponseSender",
    "TimedOutputs",
]


@dataclass(frozen=True)
class InstanceSpec:
    """Where and how one instance runs, derived from ``instance_group``."""

    name: str
    kind: str  # ModelInstanceGroup.Kind name: KIND_CPU, KIND_GPU, ...
    device_id: int
    threads: int  # intra-op thread budget so that instances do not oversubscribe the cores


#: How a worker's outputs (or its error) reach the loop that sent it a batch.
Answer = Callable[[dict[str, Array] | None, BaseException | None], None]


class TimedOutputs(dict[str, Array]):
    """Outputs that carry their execution's own start and end (``time.monotonic_ns``),
    from an instance whose run happens in another process: ModelStatistics' compute_infer
    is then that run, as with an instance in a thread, and the round trip to the worker
    counts as compute_input and compute_output. CLOCK_MONOTONIC is one clock for every
    process of the machine."""

    def __init__(self, outputs: Mapping[str, Array], run_start_ns: int, run_end_ns: int) -> None:
        super().__init__(outputs)
        self.run_start_ns = run_start_ns
        self.run_end_ns = run_end_ns


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

    @property
    def supports_gpu(self) -> bool:
        """Whether instances can run on a GPU (``KIND_AUTO`` becomes ``KIND_GPU`` only then)."""
        ...

    def open(
        self, config: mc.ModelConfig, version_path: Path, spec: InstanceSpec
    ) -> ModelInstance | RequestInstance:
        """Load the version's model file into one instance; raise ValueError with a reason."""
        ...


@dataclass
class BackendRequest:
    """One request as a request backend sees it (model-side names, batch dim included)."""

    inputs: dict[str, Array]
    requested_outputs: list[str]
    request_id: str = ""
    parameters: dict[str, bool | int | float | str] = field(default_factory=dict)
    correlation_id: int | str | None = None
    timeout_us: int = 0  # the request's own "timeout" parameter (0: none given)
    sequence_start: bool = False
    sequence_end: bool = False
    # The scheduler may run this request again (``sequence_batching { iterative_sequence:
    # true }``, a request that started its sequence), as Triton's iterative sequencer does.
    reschedulable: bool = False
    # Set by the backend: the model released a reschedulable request with
    # TRITONSERVER_REQUEST_RELEASE_RESCHEDULE; it got no final response and runs again.
    rescheduled: bool = False


class ResponseSender(Protocol):
    def send(
        self,
        outputs: Mapping[str, Array] | None = None,
        error: str | ServerError | None = None,
        final: bool = False,
        parameters: Mapping[str, bool | int | float | str] | None = None,
    ) -> None:
        """Thread-safe. ``final`` marks the last response for this request; a response may
        be empty (no outputs) when it only carries the final flag. An ``error`` given as a
        message reaches the client as INTERNAL; a ``ServerError`` keeps its code.
        ``parameters`` go to the client with the response (an ensemble's sequence)."""
        ...

    @property
    def cancelled(self) -> bool:
        """The caller went away: a decoupled model should stop producing."""
        ...


@runtime_checkable
class RequestInstance(Protocol):
    spec: InstanceSpec

    def signature(self) -> ModelSignature | None:
        """The model's tensors if it can tell (auto-complete), else None."""
        ...

    def execute_requests(
        self, requests: Sequence[BackendRequest], senders: Sequence[ResponseSender]
    ) -> None:
        """Blocking. Non-decoupled models send exactly one final response per request before
        returning; decoupled models may keep sending from their own threads afterwards."""
        ...

    def close(self) -> None: ...
