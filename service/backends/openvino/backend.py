"""OpenVINO instances: a compiled model and an infer request per instance, run on the CPU
as Triton's openvino_backend (r24.10) runs them.

* Loading follows Triton's order: the model-level parameters (CPU_EXTENSION_PATH,
  SKIP_OV_DYNAMIC_BATCHSIZE, ENABLE_BATCH_PADDING, RESHAPE_IO_LAYERS), the model file
  (``model.xml`` unless ``default_model_filename`` names another file OpenVINO reads, an
  ONNX one for example), auto-complete, then the config checked against the model with
  Triton's texts while a PrePostProcessor sets each tensor's element type (and layout
  ``N...`` when batching) and ``ov::set_batch`` fixes the batch to ``max_batch_size``;
  the CPU device's parameters last, then compilation.
* Executing: the merged batch must be ``max_batch_size`` (the model's fixed batch) unless
  ENABLE_BATCH_PADDING pads it with zeros; the outputs lose the padding again.
* ``signature`` declares the tensors as the checked config has them, so that the generic
  checks agree and, for instances in worker processes, the parent's config is completed
  from what the worker's auto-complete found.

OpenVINO releases the GIL while it infers, so instances in worker threads run in
parallel; each compiled model gets the instance's share of the cores
(INFERENCE_NUM_THREADS) unless the config says otherwise.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov

from inference import model_config_pb2 as mc
from wire import datatypes

from ...errors import Internal, InvalidArgument, ServerError, Unavailable
from ...repository.completion import ModelSignature, internal_tensors
from ...types import TensorSpec
from .. import backend_config
from ..base import Array, InstanceSpec
from ..framework import FrameworkBackend
from .rules import (
    Dim,
    ModelOptions,
    batch_error,
    check_allowed,
    compare_dims,
    config_dims,
    datatype_error,
    device_properties,
    model_options,
    reshaped,
)

__all__ = ["OpenVinoBackend", "OpenVinoInstance"]

log = logging.getLogger(__name__)

DEFAULT_FILENAME = "model.xml"
#: OpenVINO element type name -> the config's datatype (``OpenVINOElementToModelConfigDataType``).
_CONFIG_TYPE = {
    "boolean": "TYPE_BOOL",
    "u8": "TYPE_UINT8",
    "u16": "TYPE_UINT16",
    "u32": "TYPE_UINT32",
    "u64": "TYPE_UINT64",
    "i8": "TYPE_INT8",
    "i16": "TYPE_INT16",
    "i32": "TYPE_INT32",
    "i64": "TYPE_INT64",
    "f16": "TYPE_FP16",
    "f32": "TYPE_FP32",
}
_OV_TYPE = {
    "TYPE_BOOL": ov.Type.boolean,
    "TYPE_UINT8": ov.Type.u8,
    "TYPE_UINT16": ov.Type.u16,
    "TYPE_UINT32": ov.Type.u32,
    "TYPE_UINT64": ov.Type.u64,
    "TYPE_INT8": ov.Type.i8,
    "TYPE_INT16": ov.Type.i16,
    "TYPE_INT32": ov.Type.i32,
    "TYPE_INT64": ov.Type.i64,
    "TYPE_FP16": ov.Type.f16,
    "TYPE_FP32": ov.Type.f32,
}


def _ov_error(what: str, exc: BaseException) -> Internal:
    """Triton's ``RETURN_IF_OPENVINO_ERROR`` text."""
    return Internal(f"openvino error in {what} : {exc}")


def _dims(port: Any) -> list[Dim]:
    shape = port.get_partial_shape()
    out: list[Dim] = []
    for dim in shape:
        if dim.is_static:
            out.append((dim.get_length(), dim.get_length()))
        else:
            out.append((dim.get_min_length(), dim.get_max_length()))
    return out


def _has_batch(port: Any) -> bool:
    return bool(ov.layout_helpers.has_batch(ov.layout_helpers.get_layout(port)))


def _auto_complete(config: mc.ModelConfig, model: Any) -> None:
    """Triton's ``AutoCompleteConfig``: max_batch_size (and dynamic batching) from the
    model's layouts, inputs and outputs from the model when the config has none."""
    settings = backend_config.current()
    ports = [*model.inputs, *model.outputs]
    if all(_has_batch(p) for p in ports):
        if config.max_batch_size == 0:
            config.max_batch_size = max(settings.default_max_batch_size("openvino"), 1)
            log.warning(
                "autofilled max_batch_size to %d for model '%s' since batching is supported "
                "but no max_batch_size is specified in model configuration. Must specify "
                "max_batch_size to utilize autofill with a larger max batch size",
                config.max_batch_size,
                config.name,
            )
        if (
            config.max_batch_size > 1
            and not config.HasField("dynamic_batching")
            and not config.HasField("sequence_batching")
        ):
            config.dynamic_batching.SetInParent()
    elif config.max_batch_size != 0:
        log.warning(
            "model layout for model %s does not support batching while non-zero "
            "max_batch_size is specified",
            config.name,
        )
    for kind, tensors, model_ports in (
        ("input", config.input, model.inputs),
        ("output", config.output, model.outputs),
    ):
        if len(tensors):
            log.info(
                "skipping %s model configuration auto-complete for '%s': %s already specified",
                kind,
                config.name,
                kind,
            )
            continue
        for port in model_ports:
            tensor = tensors.add()
            tensor.name = port.get_any_name()
            tensor.data_type = mc.DataType.Value(  # type: ignore[assignment]
                _CONFIG_TYPE.get(port.get_element_type().get_type_name(), "TYPE_INVALID")
            )
            # -1 for each dynamic dimension (Triton writes -1 for every dimension of a
            # shape with any dynamic one, which its own output check then refuses).
            start = 1 if config.max_batch_size > 0 else 0
            tensor.dims.extend(low if low == high else -1 for low, high in _dims(port)[start:])


def _configure(config: mc.ModelConfig, model: Any, options: ModelOptions) -> Any:
    """Triton's ``ValidateConfigureModel``: the config's tensors checked against the
    model's, element types (and the batch layout) applied; the model to compile."""
    inputs = model.inputs
    # The sequence batcher's controls and states are model inputs too (Triton counts only
    # the config's inputs, which fails every model with controls: decision 047).
    internal_inputs, internal_outputs = internal_tensors(config)
    expected = len(config.input) + len(internal_inputs)
    if len(inputs) != expected:
        raise InvalidArgument(
            f"unable to load model '{config.name}', configuration expects "
            f"{expected} inputs, model provides {len(inputs)}"
        )
    by_name = {p.get_any_name(): p for p in inputs}
    ppp = ov.preprocess.PrePostProcessor(model)
    batch = config.max_batch_size
    try:
        for spec in internal_inputs:
            check_allowed("input", spec.name, list(by_name))
            info = ppp.input(spec.name).tensor()
            info.set_element_type(_OV_TYPE[datatypes.config_type_for(spec.datatype)])
            if batch:
                info.set_layout(ov.Layout("N..."))
        for tensor in config.input:
            check_allowed("input", tensor.name, list(by_name))
            error = datatype_error(config.name, "input", tensor)
            if error is not None:
                raise error
            info = ppp.input(tensor.name).tensor()
            info.set_element_type(_OV_TYPE[mc.DataType.Name(tensor.data_type)])
            dims = config_dims(tensor)
            shape = _dims(by_name[tensor.name])
            if options.reshape_io_layers:
                info.set_shape(ov.PartialShape(reshaped(shape, dims, batch)))
            else:
                compare_dims(config.name, tensor.name, shape, dims, batch, exact=False)
            if batch:
                info.set_layout(ov.Layout("N..."))
        model = _built(ppp, "apply model input preprocessing")
        if batch:
            try:
                ov.set_batch(model, batch)
            except Exception as exc:
                raise _ov_error("setting max batch size", exc) from None
        outputs = {p.get_any_name(): p for p in model.outputs}
        ppp = ov.preprocess.PrePostProcessor(model)
        for spec in internal_outputs:
            check_allowed("output", spec.name, list(outputs))
            ppp.output(spec.name).tensor().set_element_type(
                _OV_TYPE[datatypes.config_type_for(spec.datatype)]
            )
        for output in config.output:
            check_allowed("output", output.name, list(outputs))
            error = datatype_error(config.name, "output", output)
            if error is not None:
                raise error
            ppp.output(output.name).tensor().set_element_type(
                _OV_TYPE[mc.DataType.Name(output.data_type)]
            )
            compare_dims(
                config.name,
                output.name,
                _dims(outputs[output.name]),
                config_dims(output),
                batch,
                exact=True,
            )
        return _built(ppp, "apply model output preprocessing")
    except ServerError:
        raise
    except Exception as exc:  # a PrePostProcessor step OpenVINO refused
        raise _ov_error("model preprocessing", exc) from None


def _built(ppp: Any, what: str) -> Any:
    try:
        return ppp.build()
    except Exception as exc:
        raise _ov_error(what, exc) from None


class OpenVinoBackend(FrameworkBackend["OpenVinoInstance"]):
    name = "openvino"

    @property
    def supports_gpu(self) -> bool:
        return False  # Triton's openvino backend runs on the CPU only

    def _open(
        self, config: mc.ModelConfig, version_path: Path, spec: InstanceSpec
    ) -> OpenVinoInstance:
        if spec.kind != "KIND_CPU":
            raise InvalidArgument(
                f"unable to load model '{config.name}', Triton openVINO backend supports "
                "only CPU device"
            )
        options = model_options(config)
        core = ov.Core()
        if options.cpu_extension is not None:
            try:
                core.add_extension(options.cpu_extension)
            except Exception as exc:
                raise _ov_error(" loading custom CPU extensions", exc) from None
            log.info("CPU (MKLDNN) extensions is loaded%s", options.cpu_extension)
        model_file = version_path / (config.default_model_filename or DEFAULT_FILENAME)
        if not model_file.is_file():
            raise Unavailable(f"unable to find '{model_file}' for model '{config.name}'")
        try:
            model = core.read_model(str(model_file))
        except Exception as exc:
            raise _ov_error("reading model", exc) from None
        if backend_config.current().auto_complete:
            _auto_complete(config, model)
        model = _configure(config, model, options)
        properties: dict[str, Any] = dict(device_properties(config))
        properties.setdefault("INFERENCE_NUM_THREADS", spec.threads)
        try:
            core.set_property("CPU", properties)
        except Exception as exc:
            raise _ov_error("configuring openvino core", exc) from None
        batching = config.max_batch_size != 0 and not options.skip_dynamic_batchsize
        try:
            compiled = core.compile_model(model, "CPU", {"ALLOW_AUTO_BATCHING": batching})
            request = compiled.create_infer_request()
        except Exception as exc:
            raise _ov_error("loading model", exc) from None
        log.info(
            "model '%s' instance '%s': OpenVINO %s %s on CPU",
            config.name,
            spec.name,
            ov.get_version(),
            model_file.name,
        )
        return OpenVinoInstance(config, spec, request, options)


class OpenVinoInstance:
    def __init__(
        self, config: mc.ModelConfig, spec: InstanceSpec, request: Any, options: ModelOptions
    ) -> None:
        self.spec = spec
        self._request = request
        self._max_batch = config.max_batch_size
        self._padding = options.batch_padding
        self._first = config.input[0].name if config.input else None
        internal_inputs, internal_outputs = internal_tensors(config)
        self._outputs = [o.name for o in config.output] + [t.name for t in internal_outputs]
        batch = (-1,) if config.max_batch_size > 0 else ()
        self._signature = ModelSignature(
            inputs=[
                TensorSpec(t.name, _datatype(t.data_type), (*batch, *config_dims(t)))
                for t in config.input
            ]
            + internal_inputs,
            outputs=[
                TensorSpec(t.name, _datatype(t.data_type), (*batch, *config_dims(t)))
                for t in config.output
            ]
            + internal_outputs,
        )

    def signature(self) -> ModelSignature:
        return self._signature

    def execute(self, inputs: Mapping[str, Array], outputs: Sequence[str]) -> dict[str, Array]:
        pad = 0
        if self._max_batch > 0 and inputs:
            first = inputs.get(self._first or "")
            if first is None:
                first = next(iter(inputs.values()))
            batch = int(first.shape[0])
            if batch != self._max_batch:
                if not self._padding:
                    raise batch_error(self._max_batch, batch)
                pad = self._max_batch - batch
        request = self._request
        for name, array in inputs.items():
            if pad:
                array = np.concatenate([array, np.zeros((pad, *array.shape[1:]), array.dtype)])
            array = np.ascontiguousarray(array)
            # The request reads the array in place, as Triton's backend sets its input
            # buffers; a read-only one (a wire buffer) is copied by OpenVINO.
            tensor = ov.Tensor(array, shared_memory=array.flags.writeable)
            try:
                request.set_tensor(name, tensor)
            except Exception as exc:
                raise _ov_error("setting tensor data", exc) from None
        try:
            request.infer()
        except Exception as exc:
            raise _ov_error("running async inference", exc) from None
        produced: dict[str, Array] = {}
        for name in self._outputs:
            # A copy: the request reuses its output buffers on the next run.
            value = np.array(request.get_tensor(name).data)
            if self._max_batch > 0:
                if value.shape[0] not in (self._max_batch, self._max_batch - pad):
                    raise Internal(
                        "expected the batch size of openvino model output to be "
                        f"{self._max_batch}, got {value.shape[0]}"
                    )
                value = value[: self._max_batch - pad]
            produced[name] = value
        return {name: produced[name] for name in outputs}

    def close(self) -> None:
        self._request = None


def _datatype(data_type: int) -> str:
    return datatypes.datatype_from_config(mc.DataType.Name(data_type))
