"""``backend: "identity"``: every ``INPUT<i>`` comes back as ``OUTPUT<i>``, as Triton's
identity backend does. Test knobs (config ``parameters``, string values):

* ``execute_delay_ms``: sleep this long in every execution (one sleep per batch of requests);
* ``instance_wise_delay_multiplier``: when > 0, the delay is multiplied by the instance's
  index in its group plus one, so instances of one model take different times (Triton
  multiplies by the device id, which is the same for every CPU instance here);
* ``creation_delay_sec``: sleep this long when the model is created (once per load).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

from inference import model_config_pb2 as mc

from ...repository.completion import ModelSignature
from ..base import Array, BackendRequest, InstanceSpec, ResponseSender
from .common import config_signature, instance_index, parameter

__all__ = ["IdentityBackend", "IdentityInstance"]


def _shape(tensor: mc.ModelInput | mc.ModelOutput) -> list[int]:
    return list(tensor.reshape.shape) if tensor.HasField("reshape") else list(tensor.dims)


def validate(config: mc.ModelConfig) -> None:
    """Triton's rules: INPUT<i>/OUTPUT<i> pairs with equal datatypes and shapes."""
    if len(config.input) != len(config.output):
        raise ValueError("model configuration must have equal input/output pairs")
    inputs = {}
    for tensor in config.input:
        if not tensor.name.startswith("INPUT"):
            raise ValueError(
                f"expected input name to follow INPUT<index> pattern, got '{tensor.name}'"
            )
        inputs[tensor.name.removeprefix("INPUT")] = tensor
    for out in config.output:
        if not out.name.startswith("OUTPUT"):
            raise ValueError(
                f"expected output name to follow OUTPUT<index> pattern, got '{out.name}'"
            )
        match = inputs.get(out.name.removeprefix("OUTPUT"))
        if match is None:
            raise ValueError("expected input and output indices to match")
        if match.data_type != out.data_type:
            raise ValueError(
                "expected input and output datatype to match, got "
                f"{mc.DataType.Name(match.data_type)} and {mc.DataType.Name(out.data_type)}"
            )
        if _shape(match) != _shape(out):
            raise ValueError(
                f"expected input and output shape to match, got {_shape(match)} and {_shape(out)}"
            )


class IdentityBackend:
    name = "identity"
    supports_gpu = False  # host arrays only: KIND_AUTO stays on the CPU

    def __init__(self) -> None:
        self._created = False

    def open(
        self, config: mc.ModelConfig, version_path: Path, spec: InstanceSpec
    ) -> IdentityInstance:
        try:
            validate(config)
        except ValueError as exc:
            raise ValueError(f"identity model '{config.name}': {exc}") from exc
        delay_ms = parameter(config, "execute_delay_ms", int, 0)
        multiplier = parameter(config, "instance_wise_delay_multiplier", int, 0)
        if not self._created:  # one backend object serves one load of one model version
            self._created = True
            time.sleep(max(0.0, parameter(config, "creation_delay_sec", float, 0.0)))
        if multiplier > 0:
            delay_ms *= instance_index(spec) + 1
        return IdentityInstance(config, spec, delay_ms / 1000.0)


class IdentityInstance:
    def __init__(self, config: mc.ModelConfig, spec: InstanceSpec, delay: float) -> None:
        self.spec = spec
        self.delay = delay
        self._config = config
        #: Its outputs are its inputs, as they are: an execution reads none of their bytes,
        #: so it may run on the engine's loop whatever their size (scheduling/inline.py),
        #: unless it sleeps for ``execute_delay_ms``.
        self.answers_with_views = delay == 0

    def signature(self) -> ModelSignature:
        return config_signature(self._config)

    def execute_requests(
        self, requests: Sequence[BackendRequest], senders: Sequence[ResponseSender]
    ) -> None:
        if self.delay > 0:
            time.sleep(self.delay)
        for request, sender in zip(requests, senders, strict=True):
            outputs: dict[str, Array] = {}
            error = None
            for out in [t.name for t in self._config.output]:
                if request.requested_outputs and out not in request.requested_outputs:
                    continue
                source = "INPUT" + out.removeprefix("OUTPUT")
                if source not in request.inputs:
                    error = f"output '{out}' has no corresponding input '{source}' in the request"
                    break
                outputs[out] = request.inputs[source]
            if error is not None:
                sender.send(error=error, final=True)
            else:
                sender.send(outputs, final=True)

    def close(self) -> None:
        pass
