"""ONNX Runtime instances: session options from the config, tensors in and out.

ORT releases the GIL inside ``run``, so instances in worker threads execute in parallel.
BF16 has no numpy type in ORT's Python API: such models go through OrtValues built from
the raw 16-bit patterns, and outputs are copied out of ORT's buffer the same way.

ORT falls back to the CPU without an error when a GPU provider cannot start (missing
CUDA or cuDNN libraries): ``open`` compares the providers the session really enabled
with the ones the config asked for and refuses the instance, unless the model allows the
fallback (``providers.allow_cpu_fallback``). Instances on CUDA run through IO binding
(``binding.py``).
"""

from __future__ import annotations

import ctypes
import functools
import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort

from inference import model_config_pb2 as mc

from ...errors import Internal, InvalidArgument
from ...repository.completion import ModelSignature
from ...types import TensorSpec
from ..base import Array, InstanceSpec
from .binding import BoundRunner, GraphRunner, PinnedBuffers
from .providers import (
    CUDA,
    ProviderChoice,
    allow_cpu_fallback,
    choose_providers,
    cuda_graphs_enabled,
)
from .scalars import ScalarShapes
from .tensor_types import tensor_spec

__all__ = ["OnnxRuntimeBackend", "OnnxRuntimeInstance"]

log = logging.getLogger(__name__)

_BFLOAT16_ONNX = 16  # onnx.TensorProto.BFLOAT16, without importing onnx at run time
_GRAPH_LEVELS = {
    -1: ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    1: ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
}


def _int_parameter(config: mc.ModelConfig, key: str) -> int | None:
    if key not in config.parameters:
        return None
    text = config.parameters[key].string_value
    try:
        return int(text)
    except ValueError as exc:
        raise ValueError(f"parameter '{key}' must be an integer, got '{text}'") from exc


def _session_options(config: mc.ModelConfig, spec: InstanceSpec) -> ort.SessionOptions:
    options = ort.SessionOptions()
    intra = _int_parameter(config, "intra_op_thread_count")
    inter = _int_parameter(config, "inter_op_thread_count")
    options.intra_op_num_threads = spec.threads if intra is None else intra
    if inter is not None:
        options.inter_op_num_threads = inter
    if _int_parameter(config, "execution_mode") == 1:
        options.execution_mode = ort.ExecutionMode.ORT_PARALLEL
    options.graph_optimization_level = _GRAPH_LEVELS.get(
        config.optimization.graph.level, ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    )
    options.log_severity_level = 3
    # Spinning worker threads burn a core between runs; the event loop needs it more.
    # (.get: reading a map entry with [] would add it to the config clients are shown.)
    given = config.parameters.get("allow_spinning")
    spin = "1" if given is not None and given.string_value == "true" else "0"
    options.add_session_config_entry("session.intra_op.allow_spinning", spin)
    options.add_session_config_entry("session.inter_op.allow_spinning", spin)
    return options


Runner = BoundRunner | GraphRunner


def _check_active(
    config: mc.ModelConfig, spec: InstanceSpec, choice: ProviderChoice, active: Sequence[str]
) -> None:
    """Refuse an instance whose session silently lost a provider the config asked for."""
    lost = [name for name in choice.required if name not in active]
    if not lost:
        return
    where = f" on GPU {spec.device_id}" if spec.kind == "KIND_GPU" else ""
    text = (
        f"onnxruntime did not enable {', '.join(lost)} for instance '{spec.name}'{where} "
        f"(active: {', '.join(active)})"
    )
    if allow_cpu_fallback(config):
        log.warning("model '%s': %s; running on the CPU (allow_cpu_fallback)", config.name, text)
        return
    raise ValueError(
        f"{text}: the CUDA/cuDNN libraries this onnxruntime build needs were not found or "
        "the device is unusable (see docs/gpu.md); set parameter allow_cpu_fallback to "
        "run on the CPU instead"
    )


@functools.cache
def _preload_cuda_libraries() -> None:
    """Let onnxruntime-gpu find CUDA/cuDNN installed as pip packages (``nvidia/*/lib``, e.g.
    PyTorch's) before the first CUDA session; LD_LIBRARY_PATH still wins. Once per process;
    ``ORT_PRELOAD_DLLS=0`` turns it off (docs/gpu.md)."""
    preload = getattr(ort, "preload_dlls", None)  # onnxruntime >= 1.21
    if preload is None or os.environ.get("ORT_PRELOAD_DLLS", "1") == "0":
        return
    try:
        preload()
    except Exception as exc:  # a missing library shows up as an inactive provider later
        log.warning("onnxruntime.preload_dlls failed: %s", exc)


def _runner(
    config: mc.ModelConfig, spec: InstanceSpec, session: ort.InferenceSession
) -> Runner | None:
    """IO binding for sessions on CUDA; plain ``run`` elsewhere (nothing to save on CPU)."""
    if CUDA not in session.get_providers():
        return None
    types = {arg.type for arg in (*session.get_inputs(), *session.get_outputs())}
    if types & {"tensor(string)", "tensor(bfloat16)"}:
        return None  # strings stay on the host; BF16 has its own OrtValue path
    if cuda_graphs_enabled(config):
        return GraphRunner(session, "cuda", spec.device_id)
    return BoundRunner(session, "cuda", spec.device_id, PinnedBuffers())


class OnnxRuntimeBackend:
    name = "onnxruntime"

    @property
    def supports_gpu(self) -> bool:
        """A CUDA-enabled onnxruntime build is installed (whether it works is checked per
        instance in ``open``)."""
        return CUDA in ort.get_available_providers()

    def open(
        self, config: mc.ModelConfig, version_path: Path, spec: InstanceSpec
    ) -> OnnxRuntimeInstance:
        model_file = version_path / config.default_model_filename
        if not model_file.is_file():
            raise ValueError(
                f"model file '{model_file.name}' not found in version {version_path.name}"
            )
        choice = choose_providers(config, spec, ort.get_available_providers())
        if CUDA in choice.names:
            _preload_cuda_libraries()
        options = _session_options(config, spec)
        try:
            session = ort.InferenceSession(
                str(model_file), sess_options=options, providers=choice.providers
            )
        except Exception as exc:  # ORT raises its own exception types for bad files
            raise ValueError(f"onnxruntime failed to load '{model_file.name}': {exc}") from exc
        try:
            _check_active(config, spec, choice, session.get_providers())
        except ValueError:
            del session
            raise
        runner = _runner(config, spec, session)
        # Which providers took the session and how tensors reach the device: what an
        # operator checks first when a GPU model is slower than expected.
        log.info(
            "model '%s' instance '%s' (%s device %d): onnxruntime providers %s; %s",
            config.name,
            spec.name,
            spec.kind.removeprefix("KIND_"),
            spec.device_id,
            ", ".join(session.get_providers()),
            runner.description if runner is not None else "session.run",
        )
        return OnnxRuntimeInstance(config.name, spec, session, runner, config)


class OnnxRuntimeInstance:
    def __init__(
        self,
        model_name: str,
        spec: InstanceSpec,
        session: ort.InferenceSession,
        runner: Runner | None = None,
        config: mc.ModelConfig | None = None,
    ) -> None:
        self.spec = spec
        self.runner = runner
        self.providers: list[str] = session.get_providers()
        self._model_name = model_name
        self._session = session
        self._inputs = self._specs(session.get_inputs())
        self._outputs = self._specs(session.get_outputs())
        self._types = {s.name: s.datatype for s in (*self._inputs, *self._outputs)}
        self._bf16 = "BF16" in self._types.values()
        scalars = ScalarShapes(config, self._inputs, self._outputs)
        self._scalars = scalars if scalars.inputs or scalars.outputs else None
        # Nothing for ``_to_ort`` to change (no scalar shapes, no string tensors): the
        # inputs are the feeds as they are, with no call per tensor.
        self._plain = self._scalars is None and "BYTES" not in self._types.values()

    @staticmethod
    def _specs(args: Sequence[Any]) -> list[TensorSpec]:
        specs = []
        for arg in args:
            spec = tensor_spec(arg.name, arg.type, arg.shape)
            if spec is None:
                log.info("skipping non-tensor model value '%s' of type %s", arg.name, arg.type)
                continue
            specs.append(spec)
        return specs

    def signature(self) -> ModelSignature:
        return ModelSignature(inputs=self._inputs, outputs=self._outputs)

    def execute(self, inputs: Mapping[str, Array], outputs: Sequence[str]) -> dict[str, Array]:
        if self._plain and type(inputs) is dict:
            feeds = inputs
        else:
            feeds = {name: self._to_ort(name, array) for name, array in inputs.items()}
        try:
            if self.runner is not None:
                results = self.runner.run(feeds, outputs)
            elif self._bf16:
                values = self._session.run_with_ort_values(list(outputs), self._ort_values(feeds))
                results = [self._from_ort_value(v) for v in values]
            else:
                results = self._session.run(list(outputs), feeds)
        except Exception as exc:
            raise Internal(f"onnx runtime error: {exc}") from exc
        if self._scalars is not None:
            results = [self._scalars.result(n, r) for n, r in zip(outputs, results, strict=True)]
        return dict(zip(outputs, results, strict=True))

    def _to_ort(self, name: str, array: Array) -> Array:
        if self._scalars is not None:
            array = self._scalars.feed(name, array)
        if self._types.get(name) != "BYTES":
            return array
        # ORT's Python API takes str, not bytes, for string tensors.
        try:
            decoded = [
                item.decode("utf-8") if isinstance(item, bytes) else item for item in array.flat
            ]
        except UnicodeDecodeError as exc:
            raise InvalidArgument(
                f"input '{name}' for model '{self._model_name}' holds bytes that are not valid "
                "UTF-8, which onnxruntime string tensors require"
            ) from exc
        out = np.empty(array.shape, dtype=np.object_)
        out.flat[:] = decoded
        return out

    def _ort_values(self, feeds: Mapping[str, Array]) -> dict[str, ort.OrtValue]:
        values = {}
        for name, array in feeds.items():
            if self._types.get(name) == "BF16":
                values[name] = ort.OrtValue.ortvalue_from_numpy_with_onnx_type(
                    np.ascontiguousarray(array), _BFLOAT16_ONNX
                )
            else:
                values[name] = ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(array))
        return values

    @staticmethod
    def _from_ort_value(value: ort.OrtValue) -> Array:
        if value.data_type() != "tensor(bfloat16)":
            return np.asarray(value.numpy())
        shape = tuple(value.shape())
        count = int(np.prod(shape))
        buffer = (ctypes.c_uint16 * count).from_address(value.data_ptr())
        return np.ctypeslib.as_array(buffer).copy().reshape(shape)

    def close(self) -> None:
        if self.runner is not None:
            self.runner.close()
            self.runner = None
        del self._session
