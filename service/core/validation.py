"""Checking a request against its model's config and turning it into a backend ``Job``.

The messages follow Triton's wording, since clients and test suites match on it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .. import datatypes
from ..errors import Internal, InvalidArgument
from ..scheduling.base import Array, Job
from ..types import InferRequest, InputTensor, OutputTensor
from .model import IOSpec, ModelVersion
from .parameters import backend_parameters

__all__ = ["build_outputs", "prepare_job"]

_SHM_PARAMETER = "shared_memory_region"


def _fmt(shape: Sequence[int]) -> str:
    return "[" + ",".join(str(d) for d in shape) + "]"


def prepare_job(model: ModelVersion, request: InferRequest) -> Job:
    name = model.name
    parameters = backend_parameters(request.parameters)  # Triton checks these first
    given: dict[str, InputTensor] = {}
    for tensor in request.inputs:
        if tensor.name not in model.inputs:
            raise InvalidArgument(f"unexpected inference input '{tensor.name}' for model '{name}'")
        if tensor.name in given:
            raise InvalidArgument(
                f"input '{tensor.name}' appears more than once in the request for model '{name}'"
            )
        given[tensor.name] = tensor
    _check_required(model, given)
    batch_size = _batch_size(model, request.inputs)
    inputs = {t.name: _to_array(model, model.inputs[t.name], t, batch_size) for t in request.inputs}
    return Job(
        inputs,
        _requested_outputs(model, request),
        batch_size,
        request.id,
        priority=_int_parameter(model, request, "priority"),
        timeout_us=_int_parameter(model, request, "timeout"),
        correlation_id=_correlation_id(model, request),
        sequence_start=_flag(model, request, "sequence_start"),
        sequence_end=_flag(model, request, "sequence_end"),
        parameters=parameters,
    )


def _correlation_id(model: ModelVersion, request: InferRequest) -> int | str | None:
    value = request.parameters.get("sequence_id")
    if value is None or (isinstance(value, int | str) and not isinstance(value, bool)):
        return value
    raise InvalidArgument(
        f"parameter 'sequence_id' for model '{model.name}' must be an integer or a string, "
        f"got {value!r}"
    )


def _flag(model: ModelVersion, request: InferRequest, key: str) -> bool:
    value = request.parameters.get(key, False)
    if not isinstance(value, bool):
        raise InvalidArgument(
            f"parameter '{key}' for model '{model.name}' must be a boolean, got {value!r}"
        )
    return value


def _int_parameter(model: ModelVersion, request: InferRequest, key: str) -> int:
    value = request.parameters.get(key, 0)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidArgument(
            f"parameter '{key}' for model '{model.name}' must be a non-negative integer, "
            f"got {value!r}"
        )
    return value


def _check_required(model: ModelVersion, given: dict[str, InputTensor]) -> None:
    required = [s.name for s in model.inputs.values() if not s.optional]
    missing = [n for n in required if n not in given]
    if missing:
        got = ", ".join(f"'{n}'" for n in given)
        raise InvalidArgument(
            f"expected {len(required)} inputs but got {len(given)} inputs for model "
            f"'{model.name}'. Got input(s) [{got}], but missing required input(s) "
            f"[{', '.join(repr(n) for n in missing)}]. Please provide all required input(s)."
        )


def _batch_size(model: ModelVersion, tensors: Sequence[InputTensor]) -> int:
    if not model.batched:
        return 0
    batch = -1
    for tensor in tensors:
        if not tensor.shape:
            raise InvalidArgument(
                f"input '{tensor.name}' for model '{model.name}' has no batch dimension, "
                f"but the model has max_batch_size {model.config.max_batch_size}"
            )
        if batch == -1:
            batch = tensor.shape[0]
        elif tensor.shape[0] != batch:
            raise InvalidArgument(
                f"input '{tensor.name}' batch size {tensor.shape[0]} does not match other "
                f"inputs' batch size {batch} for model '{model.name}'"
            )
    if batch > model.config.max_batch_size:
        raise InvalidArgument(
            f"inference request batch-size must be <= {model.config.max_batch_size} "
            f"for '{model.name}'"
        )
    if batch < 1:
        raise InvalidArgument(f"inference request batch-size must be >= 1 for '{model.name}'")
    return batch


def _to_array(model: ModelVersion, spec: IOSpec, tensor: InputTensor, batch_size: int) -> Array:
    name = model.name
    if tensor.datatype != spec.datatype:
        raise InvalidArgument(
            f"inference input '{tensor.name}' data-type is '{tensor.datatype}', but model "
            f"'{name}' expects '{spec.datatype}'"
        )
    expected = spec.full_shape(model.batched)
    if len(expected) != len(tensor.shape) or any(
        e != -1 and e != g for e, g in zip(expected, tensor.shape, strict=False)
    ):
        raise InvalidArgument(
            f"unexpected shape for input '{tensor.name}' for model '{name}'. "
            f"Expected {_fmt(expected)}, got {_fmt(tensor.shape)}"
        )
    if any(d < 0 for d in tensor.shape):
        raise InvalidArgument(
            f"input '{tensor.name}' for model '{name}' has a negative dimension: "
            f"{_fmt(tensor.shape)}"
        )
    if _SHM_PARAMETER in tensor.parameters:
        raise InvalidArgument(
            f"Unable to find shared memory region: '{tensor.parameters[_SHM_PARAMETER]}'"
        )
    array = _decode(name, spec, tensor)
    if spec.reshape is not None:
        array = array.reshape(((batch_size,) if model.batched else ()) + spec.reshape)
    return array


def _decode(model_name: str, spec: IOSpec, tensor: InputTensor) -> Array:
    dtype = datatypes.DATATYPES[spec.datatype]
    count = datatypes.element_count(tensor.shape)
    if tensor.raw is not None and tensor.contents is not None:
        raise InvalidArgument(
            f"contents field must not be specified when using raw_input_contents for "
            f"'{tensor.name}' for model '{model_name}'"
        )
    if tensor.raw is not None:
        if dtype.name == "BYTES":
            try:
                flat = datatypes.deserialize_bytes_tensor(tensor.raw, count)
            except ValueError as exc:
                raise InvalidArgument(
                    f"unexpected BYTES data for input '{tensor.name}' for model "
                    f"'{model_name}': {exc}"
                ) from None
            return flat.reshape(tensor.shape)
        expected_bytes = count * dtype.itemsize
        if len(tensor.raw) != expected_bytes:
            raise InvalidArgument(
                f"input byte size mismatch for input '{tensor.name}' for model '{model_name}'. "
                f"Expected {expected_bytes}, got {len(tensor.raw)}"
            )
        return np.frombuffer(tensor.raw, dtype=dtype.numpy).reshape(tensor.shape)
    if tensor.contents is not None:
        got = len(tensor.contents)
        if got != count:
            if dtype.name == "BYTES":
                raise InvalidArgument(
                    f"expected {count} string elements for inference input '{tensor.name}' "
                    f"for model '{model_name}', got {got}"
                )
            raise InvalidArgument(
                f"input byte size mismatch for input '{tensor.name}' for model '{model_name}'. "
                f"Expected {count * dtype.itemsize}, got {got * dtype.itemsize}"
            )
        return tensor.contents.reshape(tensor.shape)
    raise InvalidArgument(f"input '{tensor.name}' for model '{model_name}' has no data")


def _requested_outputs(model: ModelVersion, request: InferRequest) -> list[str]:
    if not request.outputs:
        return list(model.outputs)
    names = []
    for output in request.outputs:
        if output.name not in model.outputs:
            raise InvalidArgument(
                f"unexpected inference output '{output.name}' for model '{model.name}'"
            )
        if "classification" in output.parameters:
            raise InvalidArgument(
                f"output '{output.name}' for model '{model.name}' asks for classification, "
                "which this server does not provide"
            )
        if _SHM_PARAMETER in output.parameters:
            raise InvalidArgument(
                f"Unable to find shared memory region: '{output.parameters[_SHM_PARAMETER]}'"
            )
        if output.name not in names:
            names.append(output.name)
    return names


def build_outputs(model: ModelVersion, job: Job, results: dict[str, Array]) -> list[OutputTensor]:
    """Backend arrays -> client-visible outputs, undoing any config ``reshape``."""
    outputs = []
    for name in job.outputs:
        spec = model.outputs[name]
        array = results[name]
        expected = datatypes.DATATYPES[spec.datatype].numpy
        if array.dtype != expected and not (spec.datatype == "BYTES" and array.dtype.kind in "OSU"):
            raise Internal(
                f"model '{model.name}' produced output '{name}' as {array.dtype}, but its "
                f"config declares {spec.datatype}"
            )
        if spec.reshape is not None:
            leading = (array.shape[0],) if model.batched else ()
            array = array.reshape(leading + spec.dims)
        outputs.append(OutputTensor(name, spec.datatype, array))
    return outputs
