"""``backend: "square"`` (decoupled): input ``IN`` (INT32, one element) holding ``n``; the
model sends ``n`` responses, each with ``OUT`` (INT32, the shape of IN) equal to ``n``,
then an empty response carrying only the final flag (only that one when ``n <= 0``).
Each request streams from its own thread, so ``execute`` returns at once; a cancelled
request stops early with an error.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

import numpy as np

from inference import model_config_pb2 as mc

from ..base import Array, BackendRequest, InstanceSpec, ResponseSender
from .common import StreamingBackend, StreamingInstance

__all__ = ["SquareBackend", "SquareInstance"]


def validate(config: mc.ModelConfig) -> None:
    for kind, tensors, name in (("input", config.input, "IN"), ("output", config.output, "OUT")):
        if [t.name for t in tensors] != [name]:
            raise ValueError(f"expected one {kind} named {name}, got {[t.name for t in tensors]}")
        if tensors[0].data_type != mc.TYPE_INT32:
            got = mc.DataType.Name(tensors[0].data_type)
            raise ValueError(f"expected {name} datatype to be INT32, got {got}")
        if list(tensors[0].dims) != [1]:
            raise ValueError(f"expected {name} shape to be [1], got {list(tensors[0].dims)}")


class SquareBackend(StreamingBackend):
    name = "square"
    validate = staticmethod(validate)

    def instance(self, config: mc.ModelConfig, spec: InstanceSpec) -> SquareInstance:
        return SquareInstance(config, spec, self.name)


class SquareInstance(StreamingInstance):
    def execute_requests(
        self, requests: Sequence[BackendRequest], senders: Sequence[ResponseSender]
    ) -> None:
        for request, sender in zip(requests, senders, strict=True):
            value = np.asarray(request.inputs["IN"])
            if value.size != 1:
                sender.send(error=f"expected IN to hold one element, got {value.size}", final=True)
                continue
            self._streams.start(partial(self._respond, sender, value))

    def _respond(self, sender: ResponseSender, value: Array) -> None:
        count = int(value.reshape(-1)[0])
        out = np.full(value.shape, count, dtype=np.int32)
        for _ in range(max(0, count)):
            if self._streams.stopping.is_set():
                sender.send(error="model instance is being unloaded", final=True)
                return
            if sender.cancelled:
                sender.send(error="request cancelled", final=True)
                return
            sender.send({"OUT": out.copy()})
        sender.send(final=True)
