"""Transport-free request and response types: what the core, schedulers and backends see.

Handlers translate protocol messages into these and back; nothing below the handlers
touches a protobuf inference message.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy.typing as npt

__all__ = [
    "InferRequest",
    "InferResponse",
    "InputTensor",
    "OutputTensor",
    "ParameterValue",
    "RequestedOutput",
    "TensorSpec",
]

ParameterValue = bool | int | float | str
Array = npt.NDArray[Any]


@dataclass(slots=True)
class InputTensor:
    """An input as it arrived: raw wire bytes, or typed contents already flattened.

    Decoding into a shaped array waits until the model is known, so that an unknown
    model is reported as such before any tensor fault.
    """

    name: str
    datatype: str
    shape: tuple[int, ...]
    raw: bytes | None = None
    contents: Array | None = None
    parameters: dict[str, ParameterValue] = field(default_factory=dict)


@dataclass(slots=True)
class RequestedOutput:
    name: str
    parameters: dict[str, ParameterValue] = field(default_factory=dict)


@dataclass(slots=True)
class InferRequest:
    model_name: str
    model_version: str = ""
    id: str = ""
    inputs: list[InputTensor] = field(default_factory=list)
    outputs: list[RequestedOutput] = field(default_factory=list)
    parameters: dict[str, ParameterValue] = field(default_factory=dict)


@dataclass(slots=True)
class OutputTensor:
    """A computed output. BF16 arrays hold raw 16-bit patterns (see ``datatypes``)."""

    name: str
    datatype: str
    array: Array

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(int(d) for d in self.array.shape)


@dataclass(slots=True)
class InferResponse:
    model_name: str
    model_version: str
    id: str
    outputs: list[OutputTensor]
    parameters: dict[str, ParameterValue] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class TensorSpec:
    """A model tensor as metadata reports it: full shape, batch dimension included."""

    name: str
    datatype: str
    shape: tuple[int, ...]
