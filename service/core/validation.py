"""Checking a request against its model's config and turning it into a backend ``Job``.

The messages follow Triton's wording, since clients and test suites match on it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from wire import datatypes

from ..errors import Internal, InvalidArgument, request_prefix
from ..scheduling.base import Array, Job
from ..types import TRACE_CONTEXT, InferRequest, InputTensor, OutputTensor, ParameterValue
from .classification import check_classification
from .input_order import unordered_order
from .model import IOSpec, ModelVersion
from .parameters import backend_parameters
from .shaping import reshape_outputs

__all__ = ["build_outputs", "job_of", "prepare_job", "typed_outputs"]


def _fmt(shape: Sequence[int]) -> str:
    return "[" + ",".join(str(d) for d in shape) + "]"


# Triton appends this to a shape error of a batching model (infer_request.cc, Normalize).
_BATCH_NOTE = (
    "NOTE: Setting a non-zero max_batch_size in the model config requires a batch "
    "dimension to be prepended to each input shape. If you want to specify the full shape "
    "including the batch dim in your input dims config, try setting max_batch_size to "
    "zero. See the model configuration docs for more info on max_batch_size."
)


def prepare_job(model: ModelVersion, request: InferRequest) -> Job:
    parameters = backend_parameters(request.parameters)  # Triton checks these first
    given: dict[str, InputTensor] = {}
    for tensor in request.inputs:
        if tensor.name in given:
            raise _error(request.id, f"input '{tensor.name}' already exists in request")
        given[tensor.name] = tensor
    outputs = _requested_outputs(model, request)
    _check_count(model, request, given)
    try:
        batch_size, inputs = _normalize(model, request, request.inputs)
    except InvalidArgument as first:
        if len(request.inputs) > 1:
            # Triton checks the inputs in its hash map's order: report what it would.
            order = unordered_order([t.name for t in request.inputs])
            _normalize(model, request, [given[n] for n in order])
        raise first from None
    return job_of(model, request, inputs, outputs, batch_size, parameters)


def job_of(
    model: ModelVersion,
    request: InferRequest,
    inputs: dict[str, Array],
    outputs: list[str],
    batch_size: int,
    parameters: dict[str, ParameterValue] | None = None,
) -> Job:
    """The job of a request whose tensors are checked: the parameters the server consumes
    (priority, timeout, sequence fields; Triton's texts when one is malformed) and those
    that reach the backend (``parameters``, parsed here when not given)."""
    if not request.parameters:  # the common case: every parameter at its default
        job = Job(inputs, outputs, batch_size, request.id)
        job.trace_context = TRACE_CONTEXT.get()
        return job
    job = Job(
        inputs,
        outputs,
        batch_size,
        request.id,
        priority=_int_parameter(model, request, "priority"),
        timeout_us=_int_parameter(model, request, "timeout"),
        correlation_id=_correlation_id(model, request),
        sequence_start=_flag(model, request, "sequence_start"),
        sequence_end=_flag(model, request, "sequence_end"),
        parameters=backend_parameters(request.parameters) if parameters is None else parameters,
    )
    job.trace_context = TRACE_CONTEXT.get()
    return job


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


def _error(request_id: str, message: str) -> InvalidArgument:
    """A request error Triton raises with its request's ``LogRequest()`` prefix."""
    return InvalidArgument(request_prefix(request_id) + message)


def _names(names: Sequence[str]) -> str:
    """Triton's list form: ``['A','B']`` (no space), ``[]`` when empty."""
    return "[" + ",".join(f"'{n}'" for n in names) + "]"


def _check_count(model: ModelVersion, request: InferRequest, given: dict[str, InputTensor]) -> None:
    """Triton's ValidateRequestInputs, with its texts (exact count without optional
    inputs, a range with them); beyond Triton, a known-names request that still lacks a
    required input is refused with the same text rather than reaching the backend."""
    if given.keys() == model.inputs.keys():
        return  # every configured input, nothing else: the common case, one set compare
    required = [s.name for s in model.inputs.values() if not s.optional]
    missing = [n for n in required if n not in given]
    total = len(model.inputs)
    if len(required) <= len(given) <= total and (
        not missing or any(n not in model.inputs for n in given)
    ):
        return  # complete, or an unknown input that Triton reports first (_batch_size)
    got = _names(unordered_order(list(given)))
    head = (
        f"expected {total} inputs"
        if total == len(required)
        else f"expected number of inputs between {len(required)} and {total}"
    )
    # Triton's text for "none missing" (too many inputs) is "]": its list loses the "[".
    lacking = _names(missing) if missing else "]"
    raise _error(
        request.id,
        f"{head} but got {len(given)} inputs for model "
        f"'{model.name}'. Got input(s) {got}, but missing required input(s) "
        f"{lacking}. Please provide all required input(s).",
    )


def _normalize(
    model: ModelVersion, request: InferRequest, tensors: Sequence[InputTensor]
) -> tuple[int, dict[str, Array]]:
    """Triton's Normalize over ``tensors`` in the given order: names and batch size
    first, then each input's datatype, shape and data."""
    batch_size = _batch_size(model, request, tensors)
    inputs = {t.name: _to_array(model, request, t, batch_size) for t in tensors}
    return batch_size, inputs


def _batch_size(model: ModelVersion, request: InferRequest, tensors: Sequence[InputTensor]) -> int:
    name = model.name
    batch = 0
    for tensor in tensors:
        if tensor.name not in model.inputs:
            raise InvalidArgument(f"unexpected inference input '{tensor.name}' for model '{name}'")
        if not model.batched:
            continue
        if not tensor.shape:
            raise _error(
                request.id,
                f"input '{tensor.name}' has no shape but model requires batch "
                f"dimension for '{name}'",
            )
        if batch == 0:
            batch = tensor.shape[0]
        elif tensor.shape[0] != batch:
            raise _error(
                request.id,
                f"input '{tensor.name}' batch size does not match other inputs for '{name}'",
            )
    if not model.batched:
        return 0
    if batch > model.config.max_batch_size:
        raise _error(
            request.id,
            f"inference request batch-size must be <= {model.config.max_batch_size} for '{name}'",
        )
    if batch < 1:  # Triton passes this on to the backend; no backend can run it
        raise _error(request.id, f"inference request batch-size must be >= 1 for '{name}'")
    return batch


def _check_shape(model: ModelVersion, request_id: str, spec: IOSpec, tensor: InputTensor) -> None:
    given = tensor.shape[1:] if model.batched else tensor.shape
    match = len(given) == len(spec.dims)
    if match:
        for want, got in zip(spec.dims, given, strict=True):
            if got < 0:
                raise _error(
                    request_id,
                    f"All input dimensions should be specified for input "
                    f"'{tensor.name}' for model '{model.name}', got {_fmt(tensor.shape)}",
                )
            if want != -1 and want != got:
                match = False
                break
    if not match:
        note = _BATCH_NOTE if model.batched else ""
        raise _error(
            request_id,
            f"unexpected shape for input '{tensor.name}' for model '{model.name}'. "
            f"Expected {_fmt(spec.full_shape(model.batched))}, got {_fmt(tensor.shape)}. {note}",
        )


def _to_array(
    model: ModelVersion, request: InferRequest, tensor: InputTensor, batch_size: int
) -> Array:
    spec = model.inputs[tensor.name]
    if tensor.datatype != spec.datatype:
        given = tensor.datatype if tensor.datatype in datatypes.DATATYPES else "<invalid>"
        raise _error(
            request.id,
            f"inference input '{tensor.name}' data-type is '{given}', but model "
            f"'{model.name}' expects '{spec.datatype}'",
        )
    _check_shape(model, request.id, spec, tensor)
    array = _decode(model.name, request.id, spec, tensor)
    if spec.reshape is not None:
        array = array.reshape(((batch_size,) if model.batched else ()) + spec.reshape)
    return array


def _bytes_fault(where: str, data: bytes, count: int) -> str:
    """Triton's ValidateBytesInputs walk over one buffer, for the message it gives; a
    last element longer than the data (which Triton lets through) gets one of ours."""
    offset, checked, end = 0, 0, len(data)
    while offset < end:
        if end - offset < 4:
            return (
                f"incomplete string length indicator for {where}, expecting 4 bytes "
                f"but only {end - offset} bytes available. Please make sure the string "
                "length indicator is in one buffer."
            )
        length = int.from_bytes(data[offset : offset + 4], "little")
        checked += 1
        if checked > count:
            return f"unexpected number of string elements {checked} for {where}, expecting {count}"
        if offset + 4 + length > end:
            if checked != count:
                break
            return (
                f"incomplete string element {checked - 1} for {where}: "
                f"{length} bytes announced, {end - offset - 4} present"
            )
        offset += 4 + length
    return f"expected {count} string elements for {where}, got {checked}"


def _decode(model_name: str, request_id: str, spec: IOSpec, tensor: InputTensor) -> Array:
    dtype = datatypes.DATATYPES[spec.datatype]
    count = datatypes.element_count(tensor.shape)
    where = f"inference input '{tensor.name}' for model '{model_name}'"
    if tensor.raw is not None:
        if dtype.name == "BYTES":
            try:
                flat = datatypes.deserialize_bytes_tensor(tensor.raw, count)
            except ValueError:
                raise _error(request_id, _bytes_fault(where, bytes(tensor.raw), count)) from None
            return flat.reshape(tensor.shape)
        expected_bytes = count * dtype.itemsize
        if len(tensor.raw) != expected_bytes:
            raise _error(
                request_id,
                f"input byte size mismatch for input '{tensor.name}' for model "
                f"'{model_name}'. Expected {expected_bytes}, got {len(tensor.raw)}",
            )
        # dtype positional: numpy parses a keyword argument at twice the cost
        return np.frombuffer(tensor.raw, dtype.numpy).reshape(tensor.shape)
    if tensor.contents is not None:
        got = len(tensor.contents)
        if got != count:
            if dtype.name == "BYTES":
                raise _error(
                    request_id,
                    f"unexpected number of string elements {count + 1} for {where}, "
                    f"expecting {count}"
                    if got > count
                    else f"expected {count} string elements for {where}, got {got}",
                )
            raise _error(
                request_id,
                f"input byte size mismatch for input '{tensor.name}' for model "
                f"'{model_name}'. Expected {count * dtype.itemsize}, got {got * dtype.itemsize}",
            )
        return tensor.contents.reshape(tensor.shape)
    raise InvalidArgument(
        f"unable to find data for input tensor '{tensor.name}' for model '{model_name}' in request."
    )


def _requested_outputs(model: ModelVersion, request: InferRequest) -> list[str]:
    if not request.outputs:
        return list(model.outputs)
    names = []
    for output in request.outputs:
        if output.name not in model.outputs:
            raise InvalidArgument(
                f"unexpected inference output '{output.name}' for model '{model.name}'"
            )
        if output.parameters:
            check_classification(model, output)
        if output.name not in names:
            names.append(output.name)
    return names


def build_outputs(model: ModelVersion, job: Job, results: dict[str, Array]) -> list[OutputTensor]:
    """Backend arrays -> client-visible outputs, undoing any config ``reshape``."""
    return reshape_outputs(model, typed_outputs(model, job, results))


def typed_outputs(model: ModelVersion, job: Job, results: dict[str, Array]) -> list[OutputTensor]:
    """The backend's arrays for ``job``'s outputs, in its shapes and, as in Triton, its
    datatypes: Triton's core sends what the backend produced (a Python model's FP16
    array for an output its config declares FP32 reaches the client as FP16; checked on
    Triton 2.51). Only an array the protocol has no datatype for is the model's failure
    (Internal), counted by the engine that ran it, so this check stays there when a
    frontend shapes the outputs (core/shaping.py). A requested output the model did not
    produce (a Python model answering only the optional inputs it got) is left out, as
    Triton's core sends only what the backend set; an ensemble step's absent output is
    then an absent ensemble tensor (scheduling/ensemble.py)."""
    outputs = []
    for name in job.outputs:
        spec = model.outputs[name]
        array = results.get(name)
        if array is None:  # requested, not produced: absent from the response, as in Triton
            continue
        expected = datatypes.DATATYPES[spec.datatype].numpy
        datatype = spec.datatype
        if array.dtype != expected and not (spec.datatype == "BYTES" and array.dtype.kind in "OSU"):
            if array.size == 0:
                # No values, so no type to disagree with (numpy types np.array([]) as
                # float64); Triton's python backend sends such an output as it is.
                array = np.empty(array.shape, dtype=expected)
            else:
                produced = datatypes.datatype_of(array.dtype)
                if produced is None:
                    raise Internal(
                        f"model '{model.name}' produced output '{name}' as {array.dtype}, "
                        "which has no datatype in the inference protocol"
                    )
                datatype = produced
        outputs.append(OutputTensor(name, datatype, array))
    return outputs
