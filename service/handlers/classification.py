"""Classification results: an output tensor turned into its top-k classes per batch entry.

A response transformation kept apart from any protocol: the v1 API answers
``cls { count: k }`` with these (index, value, label) triples, and Triton's v2
``classification`` output parameter ("value:index[:label]" strings) can format the same
entries. Ranking is by value, highest first;
equal values keep index order. Labels come from the output's ``label_filename``, read by
the core when the model loads (``InferenceServer.model_labels``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["CLASSIFIABLE", "ClassEntry", "top_classes"]

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
