"""Ragged batching: ``allow_ragged_batch`` inputs, ``batch_input`` and ``batch_output``.

What Triton's backends do to a batch of requests for a tensor model (backend repo r24.10:
``BackendInputCollector::BatchInputShape`` / ``ProcessBatchInput``,
``BackendOutputResponder::ProcessBatchOutput``; the ONNX Runtime backend's
``SetInputTensors``), as pure functions of the batch's jobs:

- a ragged input reaches the model as one flat vector, every request's elements one after
  the other (shape ``[total elements]``), for one request as for many;
- each ``batch_input`` adds a tensor computed from the shapes of its source input in each
  request (its full shape, batch dimension first), in the config's data type (INT32 or
  FP32), under each of its target names:

  ======================================== ========================= ====================
  kind                                     shape                     values
  ======================================== ========================= ====================
  BATCH_ELEMENT_COUNT                      [requests]                each one's elements
  BATCH_ACCUMULATED_ELEMENT_COUNT          [requests]                running sum
  BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO [requests + 1]           0, then running sum
  BATCH_MAX_ELEMENT_COUNT_AS_SHAPE         [largest element count]   none (Triton leaves
                                                                     them unset; zeros)
  BATCH_ITEM_SHAPE                         [batch rows, rank - 1]    each row's shape
                                                                     without batch dim
  BATCH_ITEM_SHAPE_FLATTEN                 [batch rows * (rank - 1)] the same, flat
  ======================================== ========================= ====================

- a ``batch_output`` (BATCH_SCATTER_WITH_INPUT_SHAPE) output is taken as one flat run of
  elements: each request gets the next ``prod(shape)`` of them, in the output's config
  shape (``[-1] + dims`` when the model batches) with every ``-1`` replaced by the same
  dimension of that request's source input.

Request backends (Python models) get none of this, as with Triton's python backend: each
request arrives with its own tensors. The batching key leaves ragged inputs out
(``BatchPolicy.ragged``), as Triton's core does for ``allow_ragged_batch`` inputs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from inference import model_config_pb2 as mc

from ..errors import Internal, InvalidArgument
from .base import Array, Job

__all__ = ["BatchIO", "BatchInputRule", "BatchOutputRule", "batch_input_tensor"]

_Kind = mc.BatchInput.Kind
_DTYPES = {mc.TYPE_INT32: np.dtype(np.int32), mc.TYPE_FP32: np.dtype(np.float32)}


def batch_input_tensor(kind: int, dtype: np.dtype, shapes: Sequence[Sequence[int]]) -> Array:
    """The batch input of ``kind`` for requests whose source input has ``shapes``."""
    counts = [math.prod(shape) for shape in shapes]
    if kind == _Kind.BATCH_ELEMENT_COUNT:
        return np.array(counts, dtype=dtype)
    if kind == _Kind.BATCH_ACCUMULATED_ELEMENT_COUNT:
        return np.cumsum(counts, dtype=np.int64).astype(dtype)
    if kind == _Kind.BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO:
        return np.cumsum([0, *counts], dtype=np.int64).astype(dtype)
    if kind == _Kind.BATCH_MAX_ELEMENT_COUNT_AS_SHAPE:
        return np.zeros(max(counts, default=0), dtype=dtype)
    if kind in (_Kind.BATCH_ITEM_SHAPE, _Kind.BATCH_ITEM_SHAPE_FLATTEN):
        rank = len(shapes[-1]) - 1 if shapes else 0
        rows = [tuple(shape[1:]) for shape in shapes for _ in range(shape[0])]
        items = np.array(rows, dtype=dtype).reshape(len(rows), rank)
        return items.reshape(-1) if kind == _Kind.BATCH_ITEM_SHAPE_FLATTEN else items
    raise Internal("unsupported BatchInputKind received")  # the config check refuses these


@dataclass(frozen=True, slots=True)
class BatchInputRule:
    kind: int  # mc.BatchInput.Kind
    targets: tuple[str, ...]
    dtype: np.dtype
    source: str


@dataclass(frozen=True, slots=True)
class BatchOutputRule:
    target: str
    source: str
    shape: tuple[int, ...]  # the config's, batch dimension included; -1: the input's

    def shape_for(self, given: tuple[int, ...]) -> tuple[int, ...]:
        """This output's shape for a request whose source input has shape ``given``."""
        if any(d == -1 for d in self.shape[len(given) :]):
            raise Internal(
                f"batch output '{self.target}' has more variable dimensions than its source "
                f"input '{self.source}' (shape [{','.join(map(str, given))}])"
            )
        return tuple(given[i] if d == -1 else d for i, d in enumerate(self.shape))


@dataclass(frozen=True, slots=True)
class BatchIO:
    """A model's ragged inputs, batch inputs and batch outputs (``of``: None without)."""

    ragged: frozenset[str]
    inputs: tuple[BatchInputRule, ...]
    outputs: dict[str, BatchOutputRule]

    @staticmethod
    def of(config: mc.ModelConfig) -> BatchIO | None:
        """The config's batch I/O; expects a config that ``check_batch_io`` accepted."""
        ragged = frozenset(i.name for i in config.input if i.allow_ragged_batch)
        if not (ragged or config.batch_input or config.batch_output):
            return None
        inputs = tuple(
            BatchInputRule(b.kind, tuple(b.target_name), _DTYPES[b.data_type], b.source_input[0])
            for b in config.batch_input
        )
        batch = (-1,) if config.max_batch_size > 0 else ()
        configured = {o.name: o for o in config.output}
        outputs = {}
        for b in config.batch_output:
            for target in b.target_name:
                out = configured[target]
                dims = tuple(out.reshape.shape) if out.HasField("reshape") else tuple(out.dims)
                outputs[target] = BatchOutputRule(target, b.source_input[0], batch + dims)
        return BatchIO(ragged, inputs, outputs)

    def merge(self, jobs: Sequence[Job]) -> dict[str, Array]:
        """The batch's model inputs: ragged ones flat, batch inputs added."""
        merged: dict[str, Array] = {}
        for name in jobs[0].inputs:
            parts = [job.inputs[name] for job in jobs if name in job.inputs]
            if name in self.ragged:
                merged[name] = np.concatenate([p.reshape(-1) for p in parts])
            else:
                merged[name] = parts[0] if len(parts) == 1 else np.concatenate(parts)
        for rule in self.inputs:
            shapes = []
            for job in jobs:
                source = job.inputs.get(rule.source)
                if source is None:
                    raise InvalidArgument(
                        f"batch input '{rule.targets[0]}' needs input '{rule.source}' "
                        "in every request of the batch"
                    )
                shapes.append(source.shape)
            tensor = batch_input_tensor(rule.kind, rule.dtype, shapes)
            for target in rule.targets:
                merged[target] = tensor
        return merged

    def split(self, jobs: Sequence[Job], results: dict[str, Array]) -> list[dict[str, Array]]:
        """Each job's outputs: batch outputs scattered by its input shape, the others by
        its rows of the batch (all of them for a batch of one)."""
        scattered = {
            name: self._scatter(rule, jobs, results[name])
            for name, rule in self._wanted(jobs, results)
        }
        per_job: list[dict[str, Array]] = []
        offset = 0
        single = len(jobs) == 1
        for index, job in enumerate(jobs):
            rows = slice(offset, offset + job.batch_size)
            outputs = {}
            for name in job.outputs:
                if name in scattered:
                    outputs[name] = scattered[name][index]
                else:
                    outputs[name] = results[name] if single else results[name][rows]
            per_job.append(outputs)
            offset += job.batch_size
        return per_job

    def _wanted(
        self, jobs: Sequence[Job], results: dict[str, Array]
    ) -> list[tuple[str, BatchOutputRule]]:
        wanted = {name for job in jobs for name in job.outputs}
        return [(n, r) for n, r in self.outputs.items() if n in wanted and n in results]

    @staticmethod
    def _scatter(rule: BatchOutputRule, jobs: Sequence[Job], output: Array) -> list[Array]:
        flat = np.asarray(output).reshape(-1)
        parts = []
        offset = 0
        for job in jobs:
            shape = rule.shape_for(tuple(job.inputs[rule.source].shape))
            count = math.prod(shape)
            if offset + count > flat.size:
                raise Internal(
                    f"output '{rule.target}' has {flat.size} elements, fewer than the "
                    "batch's requests take by their input shapes"
                )
            parts.append(flat[offset : offset + count].reshape(shape))
            offset += count
        return parts
