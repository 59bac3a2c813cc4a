"""Helpers shared by request backends: config parameters, the signature a config implies."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from inference import model_config_pb2 as mc
from wire import datatypes

from ...repository.completion import ModelSignature, internal_tensors
from ...types import TensorSpec
from ..base import InstanceSpec, RequestInstance

__all__ = [
    "StreamingBackend",
    "StreamingInstance",
    "Streams",
    "config_signature",
    "instance_index",
    "parameter",
    "require_decoupled",
]

T = TypeVar("T")


def parameter(config: mc.ModelConfig, key: str, parse: Callable[[str], T], default: T) -> T:
    """A ``parameters { key: ... value { string_value: ... } }`` entry, parsed."""
    if key not in config.parameters:
        return default
    text = config.parameters[key].string_value
    try:
        return parse(text)
    except ValueError as exc:
        raise ValueError(
            f"model '{config.name}': parameter '{key}' has an invalid value '{text}'"
        ) from exc


def config_signature(config: mc.ModelConfig) -> ModelSignature:
    """The tensors a request backend's model has are the ones its config declares, plus
    the sequence batcher's control and state tensors (Triton feeds those to any backend).

    Reported with full shapes (batch dimension first when batching), so the loader's
    completion and checks find the config consistent with itself.
    """
    batched = config.max_batch_size > 0

    def spec(tensor: mc.ModelInput | mc.ModelOutput) -> TensorSpec:
        dims = list(tensor.reshape.shape) if tensor.HasField("reshape") else list(tensor.dims)
        datatype = datatypes.datatype_from_config(mc.DataType.Name(tensor.data_type))
        return TensorSpec(tensor.name, datatype, tuple(([-1] if batched else []) + dims))

    inputs = [spec(t) for t in config.input]
    outputs = [spec(t) for t in config.output]
    extra_inputs, extra_outputs = internal_tensors(config)
    inputs += [t for t in extra_inputs if t.name not in {i.name for i in inputs}]
    outputs += [t for t in extra_outputs if t.name not in {o.name for o in outputs}]
    return ModelSignature(inputs=inputs, outputs=outputs)


def require_decoupled(config: mc.ModelConfig, backend: str) -> None:
    if not config.model_transaction_policy.decoupled:
        raise ValueError(
            f"model '{config.name}': the {backend} backend sends several responses per "
            "request and needs model_transaction_policy { decoupled: true }"
        )


def instance_index(spec: InstanceSpec) -> int:
    """The instance's index within its group (instance names end in ``_<index>``)."""
    match = re.search(r"_(\d+)$", spec.name)
    return int(match.group(1)) if match else 0


class Streams:
    """Threads that keep answering after ``execute_requests`` returned (decoupled models).

    ``close`` asks them to stop (``stopping`` is set, their waits return early) and joins
    them, so an unloaded instance leaves no thread behind.
    """

    def __init__(self, name: str) -> None:
        self._name = name
        self._threads: set[threading.Thread] = set()
        self._lock = threading.Lock()
        self.stopping = threading.Event()

    def start(self, target: Callable[[], None]) -> None:
        def run() -> None:
            try:
                target()
            finally:
                with self._lock:
                    self._threads.discard(threading.current_thread())

        thread = threading.Thread(target=run, name=self._name, daemon=True)
        with self._lock:
            self._threads.add(thread)
        thread.start()

    def sleep(self, seconds: float) -> bool:
        """Wait; False when the instance is closing."""
        return not self.stopping.wait(seconds) if seconds > 0 else not self.stopping.is_set()

    def close(self) -> None:
        self.stopping.set()
        with self._lock:
            threads = list(self._threads)
        for thread in threads:
            thread.join()


class StreamingInstance:
    """An instance of a decoupled built-in model: its tensors are the ones its config
    declares, and it answers from its own threads (``Streams``), joined at ``close``."""

    def __init__(self, config: mc.ModelConfig, spec: InstanceSpec, backend: str) -> None:
        self.spec = spec
        self._config = config
        self._streams = Streams(f"{backend}-{spec.name}")

    def signature(self) -> ModelSignature:
        return config_signature(self._config)

    def close(self) -> None:
        self._streams.close()


class StreamingBackend:
    """Opens a decoupled built-in model once its config is decoupled and fits ``validate``;
    a misfit is refused with the backend and the model named."""

    name: str
    supports_gpu = False  # host arrays only: KIND_AUTO stays on the CPU

    @staticmethod
    def validate(config: mc.ModelConfig) -> None:
        """Raise ValueError with the reason when the config does not fit the backend."""

    def instance(self, config: mc.ModelConfig, spec: InstanceSpec) -> RequestInstance:
        raise NotImplementedError

    def open(
        self, config: mc.ModelConfig, version_path: Path, spec: InstanceSpec
    ) -> RequestInstance:
        try:
            require_decoupled(config, self.name)
            self.validate(config)
        except ValueError as exc:
            raise ValueError(f"{self.name} model '{config.name}': {exc}") from exc
        return self.instance(config, spec)
