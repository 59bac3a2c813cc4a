"""Implicit state tensors: the initial states a config declares and a batch's input states.

Kept apart from the control tensors (``tensors.py``) because two processes need them: the
engine, which holds each sequence's state when its instance runs in a thread, and an
instance's worker process, which holds it there when the instance runs in a worker
(``held.py``). Pure numpy over the config: nothing here knows about requests.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from inference import model_config_pb2 as mc
from wire import datatypes
from wire.datatypes import Array

__all__ = ["StateSpec", "config_numpy", "state_inputs", "state_specs"]


@dataclass(frozen=True)
class StateSpec:
    input_name: str
    output_name: str
    dtype: np.dtype[Any]
    initial: Array  # one sequence's starting state, without a batch dimension


def config_numpy(config_type: int) -> np.dtype[Any]:
    """The numpy dtype of a config ``DataType`` value."""
    name = datatypes.datatype_from_config(mc.DataType.Name(config_type))
    return datatypes.DATATYPES[name].numpy


def state_specs(batching: mc.ModelSequenceBatching, model_path: Path) -> list[StateSpec]:
    """Initial states: zero_data or data_file (under ``initial_state/``), else zeros with
    every variable dimension set to 1, as Triton does."""
    specs = []
    for state in batching.state:
        dtype = config_numpy(state.data_type)
        dims = [1 if d < 0 else d for d in state.dims]
        initial = np.zeros(dims, dtype=dtype)
        if state.initial_state:
            init = state.initial_state[0]
            init_dtype = config_numpy(init.data_type) if init.data_type else dtype
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


def state_inputs(
    present: Sequence[bool],
    states: Sequence[Sequence[Array] | None],
    specs: Sequence[StateSpec],
    batched: bool,
) -> dict[str, Array]:
    """The input states of one execution, by input name.

    ``present[i]``: row i runs a request (else it is an empty slot). ``states[i]`` holds
    row i's current states (one array per spec, no batch dimension), or None for a
    starting sequence (initial state) or an empty slot.
    """
    inputs: dict[str, Array] = {}
    for index, spec in enumerate(specs):
        # Empty slots get zeros shaped like the real rows' state (which may have grown).
        real = next((st[index] for ok, st in zip(present, states, strict=True) if ok and st), None)
        filler = np.zeros_like(real) if real is not None else spec.initial
        per_row = [
            st[index] if st is not None else (spec.initial if ok else filler)
            for ok, st in zip(present, states, strict=True)
        ]
        if not batched:
            inputs[spec.input_name] = per_row[0]
            continue
        inputs[spec.input_name] = np.concatenate([row[np.newaxis] for row in per_row])
    return inputs
