"""Scalar tensors: model values ONNX Runtime reports with no dimensions (a scalar, or a
value of no known rank) served under a config shape of 1s.

Triton's ONNX Runtime backend (r24.10, onnxruntime.cc) accepts such a tensor when every
config dim is 1 (``repository.completion.check_scalar``), feeds the request's single
value as a rank-0 tensor, and gives a rank-0 result the shape the config declares for
that output. Here the same happens around ``session.run``.
"""

from __future__ import annotations

from collections.abc import Sequence

from inference import model_config_pb2 as mc

from ...repository.completion import config_shape
from ...types import TensorSpec
from ..base import Array

__all__ = ["ScalarShapes"]


class ScalarShapes:
    """The scalar inputs and outputs of one session, and the shapes its scalar results
    take. ``config`` is read at the first result, after auto-complete has filled it."""

    def __init__(
        self,
        config: mc.ModelConfig | None,
        inputs: Sequence[TensorSpec],
        outputs: Sequence[TensorSpec],
    ) -> None:
        self.inputs = frozenset(s.name for s in inputs if not s.shape)
        self.outputs = frozenset(s.name for s in outputs if not s.shape)
        self._config = config
        self._shapes: dict[str, tuple[int, ...]] = {}

    def feed(self, name: str, array: Array) -> Array:
        """A scalar input's one value as the rank-0 tensor the model takes (a request
        with more values is passed on, for ONNX Runtime to refuse)."""
        if name in self.inputs and array.ndim and array.size == 1:
            return array.reshape(())
        return array

    def result(self, name: str, array: Array) -> Array:
        """A rank-0 result in the shape the config gives its output (with the batch
        dimension of one request when the model batches)."""
        if array.ndim or name not in self.outputs:
            return array
        shape = self._shapes.get(name)
        if shape is None:
            shape = self._shapes[name] = self._shape(name)
        return array.reshape(shape)

    def _shape(self, name: str) -> tuple[int, ...]:
        config = self._config
        for tensor in config.output if config is not None else ():
            if tensor.name == name:
                batch = (1,) if config is not None and config.max_batch_size > 0 else ()
                return (*batch, *config_shape(tensor))
        return (1,)  # auto-complete's dims for a tensor with none
