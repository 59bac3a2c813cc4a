"""``backend: "repeat"`` (decoupled), after Triton's repeat backend.

Inputs ``IN`` (INT32 ``[n]``), ``DELAY`` (UINT32 ``[n]``, milliseconds) and ``WAIT``
(UINT32 ``[1]``, milliseconds); outputs ``OUT`` (INT32 ``[1]``) and ``IDX`` (UINT32 ``[1]``).
For a request it sends ``n`` responses, the i-th after waiting ``DELAY[i]`` ms with
``OUT = IN[i]`` and ``IDX = i``, then an empty response carrying only the final flag.
Execution returns after ``WAIT`` ms, so with WAIT below the sum of the delays one instance
streams several requests at once. A cancelled request stops early with an error.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

import numpy as np

from inference import model_config_pb2 as mc

from ..base import Array, BackendRequest, InstanceSpec, ResponseSender
from .common import StreamingBackend, StreamingInstance

__all__ = ["RepeatBackend", "RepeatInstance"]

_EXPECTED = {
    "input": (("IN", mc.TYPE_INT32), ("DELAY", mc.TYPE_UINT32), ("WAIT", mc.TYPE_UINT32)),
    "output": (("OUT", mc.TYPE_INT32), ("IDX", mc.TYPE_UINT32)),
}


def validate(config: mc.ModelConfig) -> None:
    if config.max_batch_size != 0:
        raise ValueError("repeat backend only supports models with max_batch_size == 0")
    for kind, tensors in (("input", config.input), ("output", config.output)):
        expected = _EXPECTED[kind]
        if len(tensors) != len(expected):
            raise ValueError(f"expected {len(expected)} {kind}s, got {len(tensors)}")
        by_name = {t.name: t for t in tensors}
        for name, data_type in expected:
            tensor = by_name.get(name)
            if tensor is None:
                raise ValueError(f"expected an {kind} named {name}")
            if tensor.data_type != data_type:
                raise ValueError(
                    f"expected {name} datatype to be {mc.DataType.Name(data_type)[5:]}, "
                    f"got {mc.DataType.Name(tensor.data_type)}"
                )
    shapes = {t.name: list(t.dims) for t in config.input}
    shapes.update({t.name: list(t.dims) for t in config.output})
    if len(shapes["IN"]) != 1 or shapes["IN"] != shapes["DELAY"]:
        raise ValueError(
            f"expected IN to have one dimension and DELAY the same shape, got "
            f"{shapes['IN']} and {shapes['DELAY']}"
        )
    for name in ("WAIT", "OUT", "IDX"):
        if shapes[name] != [1]:
            raise ValueError(f"expected {name} shape to be [1], got {shapes[name]}")


class RepeatBackend(StreamingBackend):
    name = "repeat"
    validate = staticmethod(validate)

    def instance(self, config: mc.ModelConfig, spec: InstanceSpec) -> RepeatInstance:
        return RepeatInstance(config, spec, self.name)


class RepeatInstance(StreamingInstance):
    def execute_requests(
        self, requests: Sequence[BackendRequest], senders: Sequence[ResponseSender]
    ) -> None:
        for request, sender in zip(requests, senders, strict=True):
            values = np.asarray(request.inputs["IN"]).reshape(-1).astype(np.int32)
            delays = np.asarray(request.inputs["DELAY"]).reshape(-1).astype(np.uint32)
            wait = np.asarray(request.inputs["WAIT"]).reshape(-1)
            if request.inputs["IN"].shape != request.inputs["DELAY"].shape:
                sender.send(
                    error="expected IN and DELAY shape to match, got "
                    f"{list(request.inputs['IN'].shape)} and {list(request.inputs['DELAY'].shape)}",
                    final=True,
                )
                continue
            if wait.size != 1:
                sender.send(error="unexpected size for WAIT input", final=True)
                continue
            wanted = set(request.requested_outputs)
            self._streams.start(partial(self._respond, sender, values, delays, wanted))
            self._streams.sleep(int(wait[0]) / 1000.0)

    def _respond(
        self, sender: ResponseSender, values: Array, delays: Array, wanted: set[str]
    ) -> None:
        for index, (value, delay) in enumerate(zip(values, delays, strict=True)):
            if not self._streams.sleep(int(delay) / 1000.0):
                sender.send(error="model instance is being unloaded", final=True)
                return
            if sender.cancelled:
                sender.send(error="request cancelled", final=True)
                return
            outputs = {
                "OUT": np.array([value], dtype=np.int32),
                "IDX": np.array([index], dtype=np.uint32),
            }
            sender.send({k: v for k, v in outputs.items() if not wanted or k in wanted})
        sender.send(final=True)
