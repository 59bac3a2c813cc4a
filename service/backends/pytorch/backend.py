"""PyTorch instances: a TorchScript module per instance, tensors in and out as Triton's
libtorch backend passes them (pytorch_backend r24.10).

* Loading: ``torch.jit.load`` onto the instance's device (``KIND_MODEL``: where the file
  says, the model places its own tensors); with ``ENABLE_WEIGHT_SHARING`` the instances
  of one model version on one device share one module, as Triton's ``torch_models_`` do.
* Inputs go to forward() by ``naming.input_layout``'s places; BYTES inputs become a
  ``List[str]``, as Triton passes them (1-dimensional only, which the config check
  enforces). Outputs come from forward()'s result (a Tensor, a ``List[str]`` or a tuple
  of these) by ``naming.output_positions``, each checked against its config datatype.
* Each execution applies the model's ``parameters`` as Triton's ``Execute`` does: the
  graph executor's optimization, inference mode, the JIT profiling and executor modes and
  the tensor fuser are process-wide settings in torch, set before every forward().

torch releases the GIL inside its operators, so instances in worker threads run in
parallel; its intra-op thread pool is one per process (``torch.set_num_threads``): the
load sets it to the instance's share of the cores unless ``INTRA_OP_THREAD_COUNT`` says.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from inference import model_config_pb2 as mc

from ...errors import Internal, InvalidArgument, ServerError
from ...repository.completion import ModelSignature
from ..base import Array, InstanceSpec
from ..framework import FrameworkBackend
from ..framework import model_file as find_model_file
from .naming import Argument, InputLayout, input_layout, output_positions
from .options import TorchOptions, parse_options

__all__ = ["PyTorchBackend", "PyTorchInstance"]

log = logging.getLogger(__name__)

DEFAULT_FILENAME = "model.pt"
#: torch dtype -> the config's datatype name (what Triton's messages print).
_TYPE_OF = {
    torch.bool: "TYPE_BOOL",
    torch.uint8: "TYPE_UINT8",
    torch.int8: "TYPE_INT8",
    torch.int16: "TYPE_INT16",
    torch.int32: "TYPE_INT32",
    torch.int64: "TYPE_INT64",
    torch.float16: "TYPE_FP16",
    torch.float32: "TYPE_FP32",
    torch.float64: "TYPE_FP64",
}


class _SharedModules:
    """ENABLE_WEIGHT_SHARING: one module per (model file, device), counted by the
    instances holding it; the last to close lets it go."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._modules: dict[tuple[str, int, str], tuple[Any, int]] = {}

    def acquire(self, key: tuple[str, int, str], load: Any, instance: str) -> Any:
        with self._lock:
            held = self._modules.get(key)
            if held is not None:
                self._modules[key] = (held[0], held[1] + 1)
                log.info("Reusing TorchScript model for instance '%s'", instance)
                return held[0]
            module = load()
            self._modules[key] = (module, 1)
            return module

    def release(self, key: tuple[str, int, str]) -> None:
        with self._lock:
            held = self._modules.pop(key, None)
            if held is not None and held[1] > 1:
                self._modules[key] = (held[0], held[1] - 1)


_SHARED = _SharedModules()
_THREADS_LOCK = threading.Lock()


def _arguments(module: Any) -> list[Argument]:
    """forward()'s arguments without ``self`` (a leading class-typed argument)."""
    arguments = [Argument(a.name, a.type.kind()) for a in module.forward.schema.arguments]
    if arguments and arguments[0].kind == "ClassType":
        arguments = arguments[1:]
    return arguments


def _set_threads(config: mc.ModelConfig, options: TorchOptions, spec: InstanceSpec) -> None:
    with _THREADS_LOCK:
        torch.set_num_threads(options.intra_op_threads or spec.threads)
        if options.inter_op_threads is None:
            return
        try:
            torch.set_num_interop_threads(options.inter_op_threads)
        except RuntimeError as exc:  # torch allows it once, before any inter-op work
            log.warning("model '%s': INTER_OP_THREAD_COUNT not applied: %s", config.name, exc)


#: The JIT settings last applied (``_modes``); guarded by the GIL like the settings are.
_APPLIED: list[tuple[bool, bool | None, bool | None, bool | None, bool] | None] = [None]


def _modes(options: TorchOptions) -> tuple[bool, bool | None, bool | None, bool | None, bool]:
    return (
        options.optimized_execution,
        options.jit_profiling,
        options.jit_executor,
        options.tensor_fuser,
        options.cudnn,
    )


def _apply_modes(options: TorchOptions) -> None:
    """The process-wide JIT settings Triton sets before each forward(). Only this module
    sets them, so a forward() after one of a model with the same settings skips the five
    calls (they are ~10 % of a small model's call)."""
    modes = _modes(options)
    if _APPLIED[0] == modes:
        return
    torch._C._set_graph_executor_optimize(options.optimized_execution)
    if options.jit_profiling is not None:
        torch._C._jit_set_profiling_mode(options.jit_profiling)
    if options.jit_executor is not None:
        torch._C._jit_set_profiling_executor(options.jit_executor)
    if options.tensor_fuser is not None:
        torch._C._jit_set_texpr_fuser_enabled(options.tensor_fuser)
    torch.backends.cudnn.enabled = options.cudnn
    _APPLIED[0] = modes


class PyTorchBackend(FrameworkBackend["PyTorchInstance"]):
    name = "pytorch"

    @property
    def supports_gpu(self) -> bool:
        return bool(torch.cuda.is_available())

    def _open(
        self, config: mc.ModelConfig, version_path: Path, spec: InstanceSpec
    ) -> PyTorchInstance:
        options = parse_options(config)
        for line in options.lines:
            log.info("%s", line)
        model_file = find_model_file(config, version_path, DEFAULT_FILENAME, spec, folder=False)
        device = torch.device("cpu")
        if spec.kind == "KIND_GPU":
            device = torch.device("cuda", spec.device_id)
        where = None if spec.kind == "KIND_MODEL" else device
        _set_threads(config, options, spec)

        def load() -> Any:
            with torch.inference_mode(options.inference_mode):
                try:
                    return torch.jit.load(str(model_file), map_location=where)
                except Exception as exc:
                    raise Internal(f"failed to load model '{config.name}': {exc}") from None

        stat = model_file.stat()
        key = (str(model_file.resolve()), stat.st_mtime_ns, str(where))
        module = _SHARED.acquire(key, load, config.name) if options.weight_sharing else load()
        try:
            layout = input_layout(config, _arguments(module))
            outputs = output_positions(config)
        except ServerError:
            if options.weight_sharing:
                _SHARED.release(key)
            raise
        log.info(
            "model '%s' instance '%s' (%s): TorchScript %s on %s",
            config.name,
            spec.name,
            spec.kind.removeprefix("KIND_"),
            model_file.name,
            "the model's own devices" if where is None else device,
        )
        shared = key if options.weight_sharing else None
        return PyTorchInstance(config, spec, module, layout, outputs, options, device, shared)


class PyTorchInstance:
    def __init__(
        self,
        config: mc.ModelConfig,
        spec: InstanceSpec,
        module: Any,
        layout: InputLayout,
        outputs: dict[str, tuple[int, str]],
        options: TorchOptions,
        device: Any,
        shared: tuple[str, int, str] | None,
    ) -> None:
        self.spec = spec
        self._model = config.name
        self._module = module
        # forward() itself, as Triton's libtorch backend calls it: nn.Module.__call__'s hook
        # machinery is Python a loaded TorchScript module never uses.
        self._forward = module.forward
        self._layout = layout
        self._outputs = outputs
        self._options = options
        self._device = device
        self._on_cpu = device.type == "cpu" or spec.kind == "KIND_MODEL"
        self._shared = shared
        # Made once and entered per call (an instance runs one call at a time): inference
        # mode turns gradients off as no_grad does (Triton enters both; the second is a
        # no-op under the first).
        self._grad_off = torch.inference_mode() if options.inference_mode else torch.no_grad()
        self._strings = {i.name for i in config.input if i.data_type == mc.TYPE_STRING} | {
            s.input_name for s in config.sequence_batching.state if s.data_type == mc.TYPE_STRING
        }

    def signature(self) -> ModelSignature | None:
        """None: a TorchScript file declares no tensor names or shapes; Triton does not
        auto-complete PyTorch configs either."""
        return None

    def execute(self, inputs: Mapping[str, Array], outputs: Sequence[str]) -> dict[str, Array]:
        values = {name: self._to_torch(name, array) for name, array in inputs.items()}
        options = self._options
        try:
            with self._grad_off:
                _apply_modes(options)
                if self._layout.as_dict:
                    result = self._forward(values)
                else:
                    arguments: list[Any] = [None] * self._layout.arguments
                    for name, value in values.items():
                        place = self._layout.positions.get(name)
                        if place is not None and place < len(arguments):
                            arguments[place] = value
                    result = self._forward(*arguments)
            elements = self._elements(result)
        except ServerError:
            raise
        except Exception as exc:
            raise Internal(f"PyTorch execute failure: {exc}") from exc
        produced = {name: self._output(name, elements) for name in self._outputs}
        if options.cache_cleaning and not self._on_cpu:
            torch.cuda.empty_cache()
        return {name: produced[name] for name in outputs}

    def _to_torch(self, name: str, array: Array) -> Any:
        if name in self._strings:
            try:
                return [
                    item.decode("utf-8") if isinstance(item, bytes) else str(item)
                    for item in array.flat
                ]
            except UnicodeDecodeError as exc:
                raise InvalidArgument(
                    f"input '{name}' for model '{self._model}' holds bytes that are not valid "
                    "UTF-8, which TorchScript strings require"
                ) from exc
        if not array.flags.writeable or not array.flags.c_contiguous:
            array = np.array(array, order="C")  # torch.from_numpy wants a writable buffer
        tensor = torch.from_numpy(array)
        return tensor if self._on_cpu else tensor.to(self._device)

    @staticmethod
    def _elements(result: Any) -> list[Any]:
        """forward()'s result as a list of Tensors and List[str] (Triton's rules)."""
        if isinstance(result, tuple):
            for index, item in enumerate(result):
                if isinstance(item, list) and not all(isinstance(s, str) for s in item):
                    kind = type(item[0]).__name__ if item else "?"
                    raise Internal(
                        f"PyTorch execute failure: output at index {index} must be of type "
                        f"Tensor or List[str], received List[{kind}]"
                    )
            return list(result)
        if isinstance(result, torch.Tensor):
            return [result]
        if isinstance(result, list):
            if all(isinstance(s, str) for s in result):
                return [result]
            kind = type(result[0]).__name__ if result else "?"
            raise Internal(
                "PyTorch execute failure: output must be of type Tensor or List[str], "
                f"received List[{kind}]"
            )
        raise Internal(
            "PyTorch execute failure: output must be of type Tensor, List[str] or Tuple "
            "containing one of these two types. It should not be a List / Dictionary of "
            "Tensors or a Scalar"
        )

    def _output(self, name: str, elements: list[Any]) -> Array:
        place, datatype = self._outputs[name]
        if place >= len(elements):
            raise Internal(f"output tensor '{name}' is not found")
        value = elements[place]
        if isinstance(value, torch.Tensor):
            provided = _TYPE_OF.get(value.dtype, f"TYPE_{value.dtype}")
            if provided != datatype:
                raise InvalidArgument(
                    f"configuration expects datatype {datatype} for output '{name}', model "
                    f"provides {provided}"
                )
            if value.dim() == 0:
                raise InvalidArgument(f"output '{name}' is a scalar which is not supported.")
            # force: detached and on the CPU, in one call (a view when it already is).
            array: Array = np.ascontiguousarray(value.numpy(force=True))
            return array
        if isinstance(value, list):
            out = np.empty(len(value), dtype=np.object_)
            out[:] = [s.encode("utf-8") for s in value]
            return out
        raise InvalidArgument(f"output '{name}' must be of type Tensor or List[str].")

    def close(self) -> None:
        if self._shared is not None:
            _SHARED.release(self._shared)
            self._shared = None
        self._module = None
        self._forward = None
        if not self._on_cpu and torch.cuda.is_available():
            torch.cuda.empty_cache()
