"""The implicit state of the sequences one instance runs, kept where the instance runs.

An instance in a worker process (``backends/isolated``) holds its sequences' state here,
so a stateful step sends the engine's client inputs and control tensors one way and the
requested outputs back, never the state (issue 25). The engine names each row's sequence
by a key and says whether it starts from the initial state (``SequenceRows``); this
builds the input states as the engine would (``states.state_inputs``), keeps the rows'
output states and reports only their shapes, which the batcher needs to group rows.

A state the engine believes held but that is not here was lost with an earlier worker:
that row runs on zeros like an empty slot, and is reported lost so that its request
fails instead of silently starting over.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from inference import model_config_pb2 as mc

from ...backends.base import Array, HeldRows, SequenceRows, StateShapes
from .states import state_inputs, state_specs

__all__ = ["HeldStates"]


class HeldStates:
    """Key -> that sequence's state arrays (one per ``state`` of the config)."""

    def __init__(self, config: mc.ModelConfig, model_path: Path) -> None:
        """``model_path``: the model's folder (initial state files), as for the engine."""
        self._specs = state_specs(config.sequence_batching, model_path)
        self._batched = config.max_batch_size > 0
        self._held: dict[int, list[Array]] = {}

    def __len__(self) -> int:
        return len(self._held)

    def inputs(self, rows: SequenceRows) -> tuple[dict[str, Array], tuple[int, ...]]:
        """Drop the forgotten sequences' states, then the batch's input states and the rows
        whose state is lost."""
        for gone_key in rows.forget:
            self._held.pop(gone_key, None)
        states: list[list[Array] | None] = []
        present: list[bool] = []
        lost: list[int] = []
        for index, (key, fresh) in enumerate(zip(rows.keys, rows.fresh, strict=True)):
            state = None if key is None or fresh else self._held.get(key)
            gone = key is not None and not fresh and state is None
            if gone:
                lost.append(index)
            states.append(state)
            present.append(key is not None and not gone)  # a lost row is filled as empty
        return state_inputs(present, states, self._specs, self._batched), tuple(lost)

    def run_outputs(self, outputs: Sequence[str]) -> list[str]:
        """What the model must compute: the requested outputs and every output state."""
        return list(dict.fromkeys([*outputs, *(spec.output_name for spec in self._specs)]))

    def keep(
        self, results: Mapping[str, Array], rows: SequenceRows, lost: tuple[int, ...]
    ) -> HeldRows:
        """Keep each real row's output states (copies: the batch's arrays go back to the
        engine or away); report their shapes."""
        shapes: list[StateShapes | None] = []
        for index, key in enumerate(rows.keys):
            if key is None or index in lost:
                shapes.append(None)
                continue
            kept = [
                np.array(results[s.output_name][index] if self._batched else results[s.output_name])
                for s in self._specs
            ]
            self._held[key] = kept
            shapes.append(tuple(tuple(int(d) for d in a.shape) for a in kept))
        return HeldRows(tuple(shapes), lost, len(self._held))
