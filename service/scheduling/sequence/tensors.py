"""What the sequence batcher adds to a batch: control tensors and implicit state.

Pure numpy, run in the instance's worker thread. Rows are batch slots: a ``None`` row is
an empty slot (Direct strategy), filled with zeros and marked not READY.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from inference import model_config_pb2 as mc
from wire import datatypes

from ..base import Array, Job

__all__ = ["ControlSpec", "StateSpec", "build_sequence_inputs", "control_specs", "state_specs"]

_Kind = mc.ModelSequenceBatching.Control


@dataclass(frozen=True)
class ControlSpec:
    name: str
    kind: int  # ModelSequenceBatching.Control.Kind
    dtype: np.dtype[Any]
    false_value: Any = 0
    true_value: Any = 1


@dataclass(frozen=True)
class StateSpec:
    input_name: str
    output_name: str
    dtype: np.dtype[Any]
    initial: Array  # one sequence's starting state, without a batch dimension


def _numpy(config_type: int) -> np.dtype[Any]:
    name = datatypes.datatype_from_config(mc.DataType.Name(config_type))
    return datatypes.DATATYPES[name].numpy


def control_specs(batching: mc.ModelSequenceBatching) -> list[ControlSpec]:
    """Raises ValueError for a control the config describes incompletely."""
    specs = []
    for control_input in batching.control_input:
        for control in control_input.control:
            name = control_input.name
            if control.kind == _Kind.CONTROL_SEQUENCE_CORRID:
                if control.data_type == mc.TYPE_INVALID:
                    raise ValueError(f"control input '{name}' (CORRID) needs a data_type")
                specs.append(ControlSpec(name, control.kind, _numpy(control.data_type)))
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


def state_specs(batching: mc.ModelSequenceBatching, model_path: Path) -> list[StateSpec]:
    """Initial states: zero_data or data_file (under ``initial_state/``), else zeros with
    every variable dimension set to 1, as Triton does."""
    specs = []
    for state in batching.state:
        dtype = _numpy(state.data_type)
        dims = [1 if d < 0 else d for d in state.dims]
        initial = np.zeros(dims, dtype=dtype)
        if state.initial_state:
            init = state.initial_state[0]
            init_dtype = _numpy(init.data_type) if init.data_type else dtype
            shape = [1 if d < 0 else d for d in init.dims]
            if init.WhichOneof("state_data") == "data_file":
                path = model_path / "initial_state" / init.data_file
                try:
                    raw = path.read_bytes()
                except OSError as exc:
                    raise ValueError(f"initial state file for '{state.input_name}': {exc}") from exc
                count = datatypes.element_count(shape)
                if len(raw) != count * init_dtype.itemsize:
                    raise ValueError(
                        f"initial state file '{init.data_file}' holds {len(raw)} bytes, "
                        f"expected {count * init_dtype.itemsize} for dims {shape}"
                    )
                initial = np.frombuffer(raw, dtype=init_dtype).reshape(shape).copy()
            else:
                initial = np.zeros(shape, dtype=init_dtype)
        specs.append(StateSpec(state.input_name, state.output_name, dtype, initial))
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
    for spec in controls:
        values = [_control_value(spec, job) for job in rows]
        inputs[spec.name] = _shaped(values, spec.dtype, declared.get(spec.name, [-1]), batched)
    for index, state_spec in enumerate(state_specs_):
        # Empty slots get zeros shaped like the real rows' state (which may have grown).
        real = next((st[index] for job, st in zip(rows, states, strict=True) if job and st), None)
        filler = np.zeros_like(real) if real is not None else state_spec.initial
        per_row = [
            st[index] if st is not None else (state_spec.initial if job else filler)
            for job, st in zip(rows, states, strict=True)
        ]
        if not batched:
            inputs[state_spec.input_name] = per_row[0]
            continue
        inputs[state_spec.input_name] = np.concatenate([row[np.newaxis] for row in per_row])
    return inputs
