"""The PyTorch 2 python runtime: the python model that serves a ``backend: "pytorch"``,
``runtime: "model.py"`` config (``../python_runtime.py``), as pytorch_backend's own
``src/model.py`` (r24.10) does in Triton. Its behaviour and texts are Triton's:

* the model file: ``default_model_filename``, else ``model.py``, else ``model.pt``, in
  ``pb_utils.get_model_dir()`` (the version folder); none: "No model found in ...";
* a ``.py`` file: the ``torch.nn.Module`` subclass it holds (one defined there first,
  then Triton's pick, the first of ``dir()``) is built without arguments, takes the
  ``state_dict`` of the ``.pt`` file beside it if there is one, and runs through
  ``torch.compile`` with ``TORCH_COMPILE_OPTIONAL_PARAMETERS`` (a JSON object); a
  ``.pt`` file: TorchScript, ``torch.jit.load``;
* the device: ``cuda:<id>`` for KIND_GPU, the CPU for KIND_CPU, else the one of the
  module's first parameter; ``NUM_THREADS`` / ``NUM_INTEROP_THREADS`` (default 1) set
  torch's pools, logged as Triton logs them;
* ``execute``: the config's inputs, in config order, are forward()'s arguments; its
  result (a tensor, or a tuple or list of them) gives the config's outputs in order. A
  batching model's requests run as one batch: ``_gather_torch_tensors`` concatenates them
  and ``_scatter_torch_tensors`` splits the outputs again (the two functions Triton's qa
  unit test, L0_pytorch_python_runtime/unit_test.py, checks). They run eagerly: Triton
  passes them through ``torch.compile`` too, which only costs compilations here.

Like any python model it imports ``triton_python_backend_utils`` and ``torch`` (the
worker's, never the server's).
"""

from __future__ import annotations

import importlib.util
import json
import os
from types import ModuleType
from typing import Any

try:
    import torch
except ModuleNotFoundError as error:
    raise RuntimeError("Missing/Incomplete PyTorch package installation") from error

import triton_python_backend_utils as pb_utils

Tensors = list[Any]  # torch.Tensor, typed as Any (torch is untyped for mypy here)


def _model_path(config: dict[str, Any]) -> str:
    names = ["model.py", "model.pt"]
    if config.get("default_model_filename"):
        names.insert(0, config["default_model_filename"])
    folder = pb_utils.get_model_dir()
    for name in names:
        path = os.path.join(folder, name)
        if os.path.exists(path):
            return path
    raise pb_utils.TritonModelException(f"No model found in {folder}/{names}")


def _parameter_file(model_path: str) -> str:
    """The ``state_dict`` beside a ``.py`` model: the same name with ``.pt``; "" if none."""
    path = os.path.splitext(model_path)[0] + ".pt"
    return path if os.path.exists(path) else ""


def _import(name: str, path: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise pb_utils.TritonModelException(f"Cannot import '{path}'")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _module_class(module: ModuleType) -> Any:
    """A ``torch.nn.Module`` subclass of the file: one it defines (so that an imported
    ``Module`` name is not taken for the model), else the first that ``dir()`` lists."""
    found = []
    for name in dir(module):
        attr = getattr(module, name)
        if isinstance(attr, type) and issubclass(attr, torch.nn.Module):
            found.append(attr)
    for attr in found:
        if attr.__module__ == module.__name__:
            return attr
    if found:
        return found[0]
    raise pb_utils.TritonModelException("Cannot find a subclass of torch.nn.Module")


def _device(kind: str, device_id: str, model: Any) -> Any:
    if kind == "GPU":
        return torch.device(f"cuda:{device_id}")
    if kind == "CPU":
        return torch.device("cpu")
    for parameter in model.parameters():
        return parameter.device
    raise pb_utils.TritonModelException("Cannot determine model device")


def _parameter(config: dict[str, Any], key: str) -> str | None:
    value = config.get("parameters", {}).get(key)
    return None if value is None else str(value.get("string_value", ""))


def _set_parallelism(config: dict[str, Any]) -> str:
    """torch's intra- and inter-op pools, 1 thread each unless the config says; the text
    Triton logs ("NUM_THREADS = 1; NUM_INTEROP_THREADS = 1; ")."""
    text = ""
    for key, setter in (
        ("NUM_THREADS", torch.set_num_threads),
        ("NUM_INTEROP_THREADS", torch.set_num_interop_threads),
    ):
        value = _parameter(config, key) or "1"
        setter(int(value))
        text += f"{key} = {value}; "
    return text


def _compile_parameters(config: dict[str, Any]) -> dict[str, Any]:
    text = _parameter(config, "TORCH_COMPILE_OPTIONAL_PARAMETERS")
    if text is None:
        return {}
    parameters: dict[str, Any] = json.loads(text)
    if "model" in parameters:
        raise pb_utils.TritonModelException(
            "'model' is not an optional parameter for 'torch.compile'"
        )
    return parameters


def _gather_torch_tensors(scatter_tensors: list[Tensors]) -> tuple[Tensors, list[int]]:
    """Requests' tensors (a list per request, inputs in order) -> one tensor per input,
    the requests concatenated along the batch dimension, and each request's batch size."""
    sections = [int(tensors[0].size()[0]) for tensors in scatter_tensors]
    columns = zip(*scatter_tensors, strict=True)
    return [torch.cat(column, 0) for column in columns], sections


def _scatter_torch_tensors(gather_tensors: Tensors, sections: list[int]) -> list[Tensors]:
    """One tensor per output, batched -> each request's outputs (``sections``: batch sizes)."""
    split = [torch.split(tensor, sections) for tensor in gather_tensors]
    return [list(parts) for parts in zip(*split, strict=True)]


def _to_torch(tensor: Any, device: Any) -> Any:
    if not tensor.is_cpu():
        return torch.from_dlpack(tensor.to_dlpack()).to(device)
    array = tensor.as_numpy()
    if not array.flags.writeable:
        array = array.copy()  # torch.from_numpy wants a writable buffer
    return torch.from_numpy(array).to(device)


def _to_triton(name: str, tensor: Any) -> Any:
    tensor = tensor.detach()
    if tensor.is_cuda or tensor.dtype == torch.bfloat16:
        return pb_utils.Tensor.from_dlpack(name, tensor.contiguous())
    return pb_utils.Tensor(name, tensor.contiguous().numpy())


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        self._name = args["model_name"]
        for_model = f"for '{self._name}'"
        self._logger = pb_utils.Logger
        self._logger.log_info(f"Initializing model instance {for_model}")
        config = json.loads(args["model_config"])
        self._batching = config.get("max_batch_size", 0) > 0
        self._inputs = [tensor["name"] for tensor in config.get("input", [])]
        self._outputs = [tensor["name"] for tensor in config.get("output", [])]
        settings = _set_parallelism(config)
        self._logger.log_verbose(f"Torch parallelism settings {for_model}: {settings}")
        parameters = _compile_parameters(config)
        self._logger.log_verbose(f"'torch.compile' optional parameter(s) {for_model}: {parameters}")
        kind, device_id = args["model_instance_kind"], args["model_instance_device_id"]
        with torch.inference_mode():
            path = _model_path(config)
            if not path.endswith(".py"):
                self._logger.log_info(f"Loading '{self._name}' as TorchScript")
                self._model = torch.jit.load(path)
                self._device = _device(kind, device_id, self._model)
                self._model.to(self._device)
                self._model.eval()
                return
            model = _module_class(_import(self._name, path))()
            self._device = _device(kind, device_id, model)
            data = _parameter_file(path)
            if data:
                model.load_state_dict(torch.load(data, map_location=self._device))
            else:
                self._logger.log_info(f"Model parameter file not found {for_model}")
            model.to(self._device)
            model.eval()
            self._model = torch.compile(model, **parameters)

    def execute(self, requests: list[Any]) -> list[Any]:
        with torch.inference_mode():
            per_request = [
                [
                    _to_torch(pb_utils.get_input_tensor_by_name(request, name), self._device)
                    for name in self._inputs
                ]
                for request in requests
            ]
            if self._batching:
                batch, sections = _gather_torch_tensors(per_request)
                results = _scatter_torch_tensors(self._run(batch), sections)
            else:
                results = [self._run(tensors) for tensors in per_request]
            return [
                pb_utils.InferenceResponse(
                    output_tensors=[
                        _to_triton(name, tensor)  # outputs beyond the config's: unnamed, dropped
                        for name, tensor in zip(self._outputs, tensors, strict=False)
                    ]
                )
                for tensors in results
            ]

    def _run(self, inputs: Tensors) -> Tensors:
        result = self._model(*inputs)
        outputs = list(result) if isinstance(result, tuple | list) else [result]
        if len(outputs) < len(self._outputs):
            raise pb_utils.TritonModelException(
                f"model '{self._name}' returned {len(outputs)} output(s), the configuration "
                f"names {len(self._outputs)}"
            )
        return outputs

    def finalize(self) -> None:
        self._logger.log_info(f"Removing model instance for '{self._name}'")
