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
from typing import TYPE_CHECKING, NamedTuple, Protocol, runtime_checkable

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
    "HeldRows",
    "InstanceSpec",
    "ModelInstance",
    "RequestInstance",
    "ResponseSender",
    "SequenceRows",
    "StateHolder",
    "StateShapes",
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

    def signature(self) -> ModelSignature | None:
        """The tensors the loaded model file declares (full shapes, -1 for dynamic); None
        for a format that declares none (TorchScript): no auto-complete then."""
        ...

    def execute(self, inputs: Mapping[str, Array], outputs: Sequence[str]) -> dict[str, Array]:
        """Run the model; blocking. ``outputs`` names what to compute, in order."""
        ...

    def close(self) -> None: ...


#: One sequence's state shapes: one per ``state`` of the config, without a batch dimension.
StateShapes = tuple[tuple[int, ...], ...]


class SequenceRows(NamedTuple):
    """Whose implicit state each row of a sequence batch runs with, for an instance that
    holds the state itself (``StateHolder``): tiny, it rides with the batch."""

    keys: tuple[int | None, ...]  # each row's sequence (a stable key); None: an empty slot
    fresh: tuple[bool, ...]  # the row begins from the initial state (START, or none kept)
    forget: tuple[int, ...]  # sequences released since the last batch: drop their state


class HeldRows(NamedTuple):
    """What a ``StateHolder`` kept of a batch's output states (never the bytes)."""

    shapes: tuple[StateShapes | None, ...]  # each row's new state; None: nothing kept
    lost: tuple[int, ...]  # rows that continue a sequence whose state it no longer holds
    held: int  # sequences whose state it holds now


@runtime_checkable
class StateHolder(Protocol):
    """A tensor instance that keeps its sequences' implicit state where it runs: one in a
    worker process, so that no state tensor crosses to the engine and back each step
    (issue 25). The sequence batcher then adds only the control tensors."""

    def execute_holding_state(
        self, inputs: Mapping[str, Array], outputs: Sequence[str], rows: SequenceRows
    ) -> tuple[dict[str, Array], HeldRows]:
        """``execute`` with the rows' input states added from what it holds; it keeps the
        rows' output states and returns only ``outputs``. A row in ``lost`` ran on zeros,
        like an empty slot: its outputs are not its sequence's and nothing was kept."""
        ...


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
    trace_context: str = ""  # a traced request's OpenTelemetry context, for BLS children
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
