"""Classification results: an output tensor turned into its top-k classes per batch entry.

A response transformation kept apart from any protocol: the v1 API answers
``cls { count: k }`` with these (index, value, label) triples, and the v2
``classification`` extension (an output's ``classification: N`` parameter) replaces the
output with a BYTES tensor of "value:index[:label]" strings, as Triton's frontends do
(``src/classification.cc``). Ranking is by value, highest first; equal values keep index
order. Labels come from the output's ``label_filename``, read by the core when the model
loads (``ModelVersion.labels``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from ..errors import InvalidArgument
from ..types import InferRequest, OutputTensor, RequestedOutput, UInt64
from .model import ModelVersion

__all__ = [
    "CLASSIFIABLE",
    "ClassEntry",
    "check_classification",
    "classify_outputs",
    "requested_classes",
    "top_classes",
]

_PARAMETER = "classification"

#: Datatypes whose values can be ranked (as Triton: integers and FP32/FP64).
CLASSIFIABLE = frozenset(
    {"UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64", "FP32", "FP64"}
)


@dataclass(frozen=True, slots=True)
class ClassEntry:
    index: int
    value: float | int
    label: str


def top_classes(
    array: npt.NDArray[Any], count: int, batched: bool, labels: Sequence[str] = ()
) -> list[list[ClassEntry]]:
    """The ``count`` best classes of each batch entry (the whole tensor when unbatched).

    The caller checks the datatype against ``CLASSIFIABLE`` first.
    """
    rows = array.reshape(array.shape[0], -1) if batched and array.ndim else array.reshape(1, -1)
    keep = min(count, rows.shape[1])
    is_float = rows.dtype.kind == "f"
    out: list[list[ClassEntry]] = []
    for row in rows:
        # Stable on the negated values: ties stay in index order.
        order = np.argsort(-row.astype(np.float64), kind="stable")[:keep]
        out.append(
            [
                ClassEntry(
                    int(i),
                    float(row[i]) if is_float else int(row[i]),
                    labels[i] if i < len(labels) else "",
                )
                for i in order
            ]
        )
    return out


def check_classification(model: ModelVersion, output: RequestedOutput) -> None:
    """Refuse a ``classification`` parameter Triton refuses (texts of its gRPC frontend)."""
    params = output.parameters
    if _PARAMETER not in params:
        return
    if "shared_memory_region" in params:
        raise InvalidArgument("output can't set both 'shared_memory_region' and 'classification'")
    count = params[_PARAMETER]
    if not isinstance(count, int) or isinstance(count, bool | UInt64):
        raise InvalidArgument(
            "invalid value type for 'classification' parameter, expected int64_param"
        )
    if count <= 0:
        raise InvalidArgument("invalid value for 'classification' parameter, expected >= 0")
    datatype = model.outputs[output.name].datatype
    if datatype not in CLASSIFIABLE:
        raise InvalidArgument(
            f"class result not available for output due to unsupported type '{datatype}'"
        )


def requested_classes(request: InferRequest) -> dict[str, int] | None:
    """``{output: N}`` for the outputs asked as classification (None when none is)."""
    counts = None
    for output in request.outputs:
        count = output.parameters.get(_PARAMETER) if output.parameters else None
        if isinstance(count, int):
            if counts is None:
                counts = {}
            counts[output.name] = count
    return counts


def classify_outputs(
    model: ModelVersion, outputs: list[OutputTensor], counts: dict[str, int]
) -> list[OutputTensor]:
    """Each output named in ``counts`` replaced by its top classes: BYTES of shape
    [batch, k] (batching models) or [k], k = min(N, classes per batch entry)."""
    return [
        _classified(model, out, counts[out.name]) if out.name in counts else out for out in outputs
    ]


def _classified(model: ModelVersion, output: OutputTensor, count: int) -> OutputTensor:
    array = output.array
    batched = model.batched and array.ndim > 0
    labels = model.labels.get(output.name, ())
    per_entry = int(np.prod(array.shape[1:] if batched else array.shape))
    keep = min(count, per_entry)
    entries = len(array) if batched else 1
    result = np.empty((entries, keep), dtype=np.object_)
    if entries and keep:
        for i, row in enumerate(top_classes(array, count, batched, labels)):
            result[i, :] = [_entry_text(entry) for entry in row]
    return OutputTensor(output.name, "BYTES", result if batched else result.reshape(keep))


def _entry_text(entry: ClassEntry) -> bytes:
    # Triton formats with std::to_string: "%f" for floating values, plain integers else.
    value = f"{entry.value:f}" if isinstance(entry.value, float) else str(entry.value)
    text = f"{value}:{entry.index}"
    if entry.label:
        text += f":{entry.label}"
    return text.encode()
