"""Transport-free request and response types: what the core, schedulers and backends see.

Handlers translate protocol messages into these and back; nothing below the handlers
touches a protobuf inference message.
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Protocol

from wire.datatypes import Array

from .statistics import BatchTimings

__all__ = [
    "FINAL_FLAG",
    "ExecutionRecord",
    "ExecutionResult",
    "InferRequest",
    "InferResponse",
    "InputTensor",
    "OutputTensor",
    "ParameterValue",
    "RequestedOutput",
    "TensorSpec",
    "UInt64",
]


class UInt64(int):
    """An integer parameter that came as ``uint64_param``: Triton tells it apart from
    ``int64_param`` ('classification' takes only the latter) and answers it as uint64."""

    __slots__ = ()


ParameterValue = bool | int | float | str

# The response parameter that marks a decoupled model's last response for its request.
FINAL_FLAG = "triton_final_response"


@dataclass(slots=True)
class InputTensor:
    """An input as it arrived: raw wire bytes, or typed contents already flattened.

    Decoding into a shaped array waits until the model is known, so that an unknown
    model is reported as such before any tensor fault.
    """

    name: str
    datatype: str
    shape: tuple[int, ...]
    # bytes from the wire; a memoryview of a frontend's shared-memory slab in the engine
    # process (valid until the request's answer has been sent).
    raw: bytes | memoryview | None = None
    contents: Array | None = None
    parameters: dict[str, ParameterValue] = field(default_factory=dict)


@dataclass(slots=True)
class RequestedOutput:
    name: str
    parameters: dict[str, ParameterValue] = field(default_factory=dict)


class TraceParent(Protocol):
    """A traced request as its BLS children see it."""

    def parent_text(self) -> str:
        """What a Python model's ``request.trace()`` carries: the JSON of the OpenTelemetry
        propagation fields, or Triton's mode's parent id."""
        ...


#: The trace of the request being run in this task, None when none: jobs take it
#: (``validation.job_of``), so that a Python model's BLS requests made with
#: ``trace=request.trace()`` nest under it. Its text is made only for a request backend's
#: batch (``scheduling.batch``), not for every traced request.
TRACE_CONTEXT: ContextVar[TraceParent | None] = ContextVar("trace_context", default=None)


@dataclass(slots=True)
class InferRequest:
    model_name: str
    model_version: str = ""
    id: str = ""
    inputs: list[InputTensor] = field(default_factory=list)
    outputs: list[RequestedOutput] = field(default_factory=list)
    parameters: dict[str, ParameterValue] = field(default_factory=dict)
    # An ensemble's step with --model-namespacing: the repository of the model it runs
    # (the step's ``model_namespace``); None for every request a client sends.
    model_namespace: str | None = None


@dataclass(slots=True)
class OutputTensor:
    """A computed output. BF16 arrays hold raw 16-bit patterns (see ``datatypes``).

    ``wire``: the output already in its wire form (a frontend process receives outputs
    so from the engine); ``array`` then only carries the shape.
    """

    name: str
    datatype: str
    array: Array
    wire: bytes | memoryview | None = field(default=None, repr=False)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(int(d) for d in self.array.shape)


@dataclass(slots=True)
class ExecutionResult:
    """What a scheduler answers for one job: its outputs, the time it waited in the queue
    and its execution's timestamps (``scheduling.base.Scheduler.submit``). Never changed,
    but not frozen: one is made per request on the loop's thread (``BatchTimings``)."""

    outputs: dict[str, Array]
    queue_ns: int
    timings: BatchTimings
    #: The response's parameters, where the scheduler sets some (an ensemble's sequence).
    parameters: dict[str, ParameterValue] | None = None


@dataclass(slots=True)
class InferResponse:
    model_name: str
    model_version: str
    id: str
    outputs: list[OutputTensor]
    parameters: dict[str, ParameterValue] = field(default_factory=dict)
    # The execution behind this response (queue time, compute timestamps), kept so that a
    # trace can draw its queue / compute spans from the response itself. Never encoded on
    # the wire; None for a response cache hit and for a decoupled model's responses (see
    # ExecutionRecord). Only a reference: the untraced path allocates nothing for it.
    timings: ExecutionResult | None = field(default=None, repr=False, compare=False)
    # True only between the engine and a frontend: the outputs are the backend's arrays
    # (datatypes checked), the config's reshape and any classification still to apply
    # (core/shaping.py). The engine leaves them so only for a request the frontend checked
    # against the version that ran it, and the frontend shapes them before anyone reads.
    unshaped: bool = False


@dataclass(slots=True)
class ExecutionRecord:
    """Where ``InferenceServer.stream_infer`` leaves the execution's timings for a trace.

    A decoupled model's responses cannot carry them: it may send every response before its
    ``execute`` returns, or none at all. Given a record, the stream ends only once the
    execution has (so the trace can close its spans in order); without one, nothing waits.
    """

    result: ExecutionResult | None = None


@dataclass(frozen=True, slots=True)
class TensorSpec:
    """A model tensor as metadata reports it: full shape, batch dimension included."""

    name: str
    datatype: str
    shape: tuple[int, ...]
