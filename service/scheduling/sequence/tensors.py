"""What the sequence batcher adds to a batch: control tensors and implicit state.

Pure numpy, run in the instance's worker thread. Rows are batch slots: a ``None`` row is
an empty slot (Direct strategy), filled with zeros and marked not READY. The input states
come from ``states.py``; an instance that holds its sequences' state itself (one in a
worker process) gets none from here and adds them there.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from inference import model_config_pb2 as mc

from ..base import Array, Job
from .states import StateSpec, config_numpy, state_inputs

__all__ = ["ControlSpec", "build_sequence_inputs", "control_specs"]

_Kind = mc.ModelSequenceBatching.Control


@dataclass(frozen=True)
class ControlSpec:
    name: str
    kind: int  # ModelSequenceBatching.Control.Kind
    dtype: np.dtype[Any]
    false_value: Any = 0
    true_value: Any = 1


def control_specs(batching: mc.ModelSequenceBatching) -> list[ControlSpec]:
    """Raises ValueError for a control the config describes incompletely."""
    specs = []
    for control_input in batching.control_input:
        for control in control_input.control:
            name = control_input.name
            if control.kind == _Kind.CONTROL_SEQUENCE_CORRID:
                if control.data_type == mc.TYPE_INVALID:
                    raise ValueError(f"control input '{name}' (CORRID) needs a data_type")
                specs.append(ControlSpec(name, control.kind, config_numpy(control.data_type)))
                continue
            dtype: np.dtype[Any]
            values: list[Any]
            if len(control.fp32_false_true) == 2:
                dtype, values = np.dtype(np.float32), list(control.fp32_false_true)
            elif len(control.int32_false_true) == 2:
                dtype, values = np.dtype(np.int32), list(control.int32_false_true)
            elif len(control.bool_false_true) == 2:
                dtype, values = np.dtype(np.bool_), list(control.bool_false_true)
            else:
                raise ValueError(
                    f"control input '{name}' needs exactly two values in one of "
                    "fp32_false_true, int32_false_true or bool_false_true"
                )
            specs.append(ControlSpec(name, control.kind, dtype, values[0], values[1]))
    return specs


def _control_value(spec: ControlSpec, job: Job | None) -> Any:
    if spec.kind == _Kind.CONTROL_SEQUENCE_CORRID:
        if job is None or job.correlation_id is None:
            return b"" if spec.dtype == np.object_ else 0
        cid = job.correlation_id
        if spec.dtype == np.object_:
            return str(cid).encode()
        return cid
    if job is None:
        return spec.false_value
    if spec.kind == _Kind.CONTROL_SEQUENCE_START:
        flag = job.sequence_start
    elif spec.kind == _Kind.CONTROL_SEQUENCE_END:
        flag = job.sequence_end
    else:  # CONTROL_SEQUENCE_READY: a row with a request is ready
        flag = True
    return spec.true_value if flag else spec.false_value


def _shaped(
    values: list[Any], dtype: np.dtype[Any], declared: Sequence[int], batched: bool
) -> Array:
    """One value per row, shaped as the model declares the tensor (e.g. [-1, 1] or [-1])."""
    array = np.empty(len(values), dtype=dtype)
    array[:] = values
    rest = [1 if d < 0 else d for d in (declared[1:] if batched else declared)]
    if batched:
        return array.reshape([len(values), *rest])
    return array.reshape(rest) if rest else array.reshape(())


def build_sequence_inputs(
    rows: Sequence[Job | None],
    states: Sequence[Sequence[Array] | None],
    controls: Sequence[ControlSpec],
    state_specs_: Sequence[StateSpec],
    declared: Mapping[str, Sequence[int]],
    batched: bool,
) -> dict[str, Array]:
    """Client inputs, control tensors and input states for one execution.

    ``states[i]`` holds row i's current states (one array per state spec, no batch
    dimension), or None for a starting sequence or an empty slot (initial state).
    """
    template = next(job for job in rows if job is not None)
    inputs: dict[str, Array] = {}
    for name, sample in template.inputs.items():
        if not batched:
            inputs[name] = sample
            continue
        parts = [job.inputs[name] if job is not None else np.zeros_like(sample) for job in rows]
        inputs[name] = parts[0] if len(parts) == 1 else np.concatenate(parts)
    # A control the model file does not declare (TorchScript, Python models) has Triton's
    # shape: [1] per request, so [batch, 1] batched (sequence_batch_scheduler.cc).
    undeclared = (-1, 1) if batched else (1,)
    for spec in controls:
        values = [_control_value(spec, job) for job in rows]
        shape = declared.get(spec.name, undeclared)
        inputs[spec.name] = _shaped(values, spec.dtype, shape, batched)
    present = [job is not None for job in rows]
    inputs.update(state_inputs(present, states, state_specs_, batched))
    return inputs
