"""What Triton's Python models import as ``import triton_python_backend_utils as pb_utils``.

The worker process registers this module under that top-level name before it imports a
model's ``model.py``, so model files written for Triton's python backend run unchanged as
long as they use the surface documented in ``README.md`` beside this file. Everything here
is plain Python and numpy: no transport. The worker wires ``InferenceResponseSender`` and the
cancellation checks to its channel through the callables it passes in.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from .model_config import ModelConfig
from .pb_core import (
    TRITON_STRING_TO_NUMPY,
    Tensor,
    TritonError,
    TritonModelException,
    deserialize_bytes_tensor,
    numpy_to_triton_type,
    serialize_byte_tensor,
    triton_string_to_numpy,
    triton_to_numpy_type,
)
from .pb_metrics import Metric, MetricFamily, MetricKind

__all__ = [
    "TRITONSERVER_MEMORY_CPU",
    "TRITONSERVER_MEMORY_CPU_PINNED",
    "TRITONSERVER_MEMORY_GPU",
    "TRITONSERVER_REQUEST_FLAG_SEQUENCE_END",
    "TRITONSERVER_REQUEST_FLAG_SEQUENCE_START",
    "TRITONSERVER_REQUEST_RELEASE_ALL",
    "TRITONSERVER_REQUEST_RELEASE_RESCHEDULE",
    "TRITONSERVER_RESPONSE_COMPLETE_FINAL",
    "TRITON_STRING_TO_NUMPY",
    "InferenceRequest",
    "InferenceResponse",
    "InferenceResponseSender",
    "InferenceTrace",
    "Logger",
    "Metric",
    "MetricFamily",
    "MetricKind",
    "ModelConfig",
    "PreferredMemory",
    "Tensor",
    "TritonError",
    "TritonModelException",
    "deserialize_bytes_tensor",
    "get_input_config_by_name",
    "get_input_tensor_by_name",
    "get_model_dir",
    "get_output_config_by_name",
    "get_output_tensor_by_name",
    "is_model_ready",
    "load_model",
    "numpy_to_triton_type",
    "serialize_byte_tensor",
    "triton_string_to_numpy",
    "triton_to_numpy_type",
    "unload_model",
    "using_decoupled_model_transaction_policy",
]

ConfigDict = dict[str, Any]

TRITONSERVER_REQUEST_FLAG_SEQUENCE_START = 1
TRITONSERVER_REQUEST_FLAG_SEQUENCE_END = 2
TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1
TRITONSERVER_REQUEST_RELEASE_ALL = 1
TRITONSERVER_REQUEST_RELEASE_RESCHEDULE = 2
TRITONSERVER_MEMORY_CPU = 0
TRITONSERVER_MEMORY_CPU_PINNED = 1
TRITONSERVER_MEMORY_GPU = 2


class InferenceResponse:
    def __init__(
        self,
        output_tensors: Sequence[Tensor] | None = None,
        error: TritonError | None = None,
        parameters: dict[str, Any] | str | None = None,
    ) -> None:
        if output_tensors is not None and not isinstance(output_tensors, (list, tuple)):
            raise TritonModelException('"output_tensors" must be a list.')
        self._outputs = list(output_tensors or [])
        self._error = error
        self._parameters = (
            parameters
            if isinstance(parameters, str)
            else (json.dumps(parameters) if parameters else "{}")
        )

    def output_tensors(self) -> list[Tensor]:
        return self._outputs

    def has_error(self) -> bool:
        return self._error is not None

    def error(self) -> TritonError | None:
        return self._error

    def parameters(self) -> str:
        return self._parameters


# emit(response or None, final) sends one response (or only the final flag) to the server.
Emit = Callable[[InferenceResponse | None, bool], None]


class InferenceResponseSender:
    """Per-request sender, with the rules and texts of Triton's ``ResponseSender``
    (python_backend's response_sender.cc): every response goes out as it is sent, in
    decoupled and non-decoupled models alike. Thread-safe."""

    def __init__(self, emit: Emit, cancelled: Callable[[], bool], decoupled: bool) -> None:
        self._emit = emit
        self._cancelled = cancelled
        self._decoupled = decoupled
        self._lock = threading.Lock()
        self._closed = False
        self._sent = 0

    @property
    def closed(self) -> bool:
        return self._closed

    def send(self, response: InferenceResponse | None = None, flags: int = 0) -> None:
        if flags not in (0, TRITONSERVER_RESPONSE_COMPLETE_FINAL):
            raise TritonModelException("Unable to send response. Unsupported flag provided.")
        if flags == 0 and response is None:
            raise TritonModelException(
                "Inference Response object must be provided when the response flags is set to zero."
            )
        if response is not None and not isinstance(response, InferenceResponse):
            raise TritonModelException("response must be a pb_utils.InferenceResponse")
        final = flags == TRITONSERVER_RESPONSE_COMPLETE_FINAL
        self.update_state(response is not None, final)
        self._emit(response, final)

    def update_state(self, has_response: bool, final: bool) -> None:
        """Triton's ``UpdateStateAndCounters``: the checks every response passes, whether
        sent here or returned from ``execute`` (which counts as a final one)."""
        with self._lock:
            if not self._decoupled:
                if has_response and self._sent > 0:
                    raise TritonModelException(
                        "Unable to send response. Non-decoupled model cannot send more than "
                        "one response."
                    )
                if not has_response and final and self._sent == 0:
                    raise TritonModelException(
                        "Unable to send response. Non-decoupled model cannot send complete "
                        "final before sending a response."
                    )
            if self._closed:
                raise TritonModelException(
                    "Unable to send response. Response sender has been closed."
                )
            if final:
                self._closed = True
            self._sent += 1

    def mark_closed(self) -> None:
        """The server has ended this request (an error from ``execute``): later sends raise."""
        with self._lock:
            self._closed = True

    def close(self) -> None:
        """Older Triton spelling of ``send(flags=TRITONSERVER_RESPONSE_COMPLETE_FINAL)``."""
        self.send(flags=TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    def is_cancelled(self) -> bool:
        return self._cancelled()


class PreferredMemory:
    """Where a BLS request would like its outputs (``InferenceRequest(preferred_memory=)``).
    This server's outputs are always in host memory, so it is accepted and kept only."""

    def __init__(self, preferred_memory_type: int = 0, preferred_device_id: int = 0) -> None:
        self.preferred_memory_type = preferred_memory_type
        self.preferred_device_id = preferred_device_id


_NO_PREFERENCE = PreferredMemory()  # what a received request reports (it never changes)

#: Runs a BLS request: (request, decoupled) -> a response, or an iterator of responses.
#: The worker sets it while ``execute`` may run (after ``initialize``, before
#: ``finalize``), as Triton allows BLS only there.
BlsExecutor = Callable[["InferenceRequest", bool], Any]
_bls_executor: BlsExecutor | None = None


def _set_bls_executor(executor: BlsExecutor | None) -> None:
    global _bls_executor
    _bls_executor = executor


#: The model's folder of files: its version folder (the worker sets it at load).
_model_dir = ""


def _set_model_dir(path: str) -> None:
    global _model_dir
    _model_dir = path


def get_model_dir() -> str:
    """The version folder of the model being served, as Triton's stub defines it: the one
    holding ``model.py`` for a python model, the repository's version folder for a model
    that a python-based backend's runtime serves (``runtime: "model.py"``)."""
    return _model_dir


#: The worker's model-control call: (operation, *arguments) -> result.
_model_control: Callable[..., Any] | None = None


def _set_model_control(call: Callable[..., Any] | None) -> None:
    global _model_control
    _model_control = call


def _control(operation: str, *args: Any) -> Any:
    if _model_control is None:
        raise TritonModelException("model control is only available inside a model's worker")
    return _model_control(operation, *args)


def load_model(model_name: str, config: str = "", files: dict[str, bytes] | None = None) -> None:
    """Load (or reload) ``model_name`` as a client's load request would, with an optional
    JSON ``config`` and ``files`` ({"file:<version>/<name>": bytes}); explicit mode only.
    Raises TritonModelException("Failed to load model: ...") as Triton's stub does."""
    if files is not None and not isinstance(files, dict):
        raise TritonModelException(
            f"failed to load model '{model_name}', files should be a dictionary of file "
            "paths and file contents"
        )
    _control("load", model_name, config, {str(k): bytes(v) for k, v in (files or {}).items()})


def unload_model(model_name: str, unload_dependents: bool = False) -> None:
    """Unload ``model_name`` (and, asked so, the ensembles using it); returns once the
    unload has started, as in Triton."""
    _control("unload", model_name, bool(unload_dependents))


def is_model_ready(model_name: str, model_version: str = "") -> bool:
    """Whether that version ("": the latest) of ``model_name`` is ready."""
    return bool(_control("ready", model_name, str(model_version)))


def _bls_parameters(parameters: Any) -> str:
    """Triton's checks and form: a dict of str keys and bool/int/str values, kept as
    ``json.dumps`` writes it. (The worker passes a received request's parameters as the
    JSON string the server sent.)"""
    if isinstance(parameters, str):
        return parameters
    values = {} if parameters is None else dict(parameters)
    for key, value in values.items():
        if not isinstance(key, str):
            raise TritonModelException(
                f"Expect parameters keys to have type str, found type {type(key)}"
            )
        if not isinstance(value, (bool, int, str)):
            raise TritonModelException(
                f"Expect parameters values to have type bool/int/str, found type {type(value)}"
            )
    return json.dumps(values)


class InferenceTrace:
    """A request's trace, to pass to the BLS requests it makes (``InferenceRequest(...,
    trace=request.trace())``) so that they are traced as its children, as in Triton."""

    def __init__(self, context: str = "") -> None:
        self._context = context

    def get_context(self) -> str | None:
        """The OpenTelemetry context (JSON of its propagation fields), or None (also in
        Triton's trace mode, which has none)."""
        return self._context if self._context.startswith("{") else None


class BlsTarget(NamedTuple):
    """What the worker sends for a BLS request besides its tensors (``bls_target``)."""

    model_name: str
    model_version: int
    request_id: str
    correlation_id: int | str
    flags: int
    timeout: int
    parameters: str
    requested_outputs: list[str]
    trace_context: str


class InferenceRequest:
    """A request as ``execute`` receives it, or one a model builds to run another model
    (BLS: ``InferenceRequest(model_name=..., inputs=..., requested_output_names=...)``
    then ``exec()`` or ``await async_exec()``), with the keyword arguments and checks
    of Triton's python backend (r24.10)."""

    def __init__(
        self,
        request_id: str = "",
        correlation_id: int | str = 0,
        inputs: Sequence[Tensor] = (),
        requested_output_names: Sequence[str] = (),
        model_name: str = "",
        model_version: int = -1,
        flags: int = 0,
        timeout: int = 0,
        preferred_memory: PreferredMemory | None = None,
        trace: Any = None,
        parameters: dict[str, bool | int | str] | str | None = None,
        sender: InferenceResponseSender | None = None,
    ) -> None:
        if not isinstance(correlation_id, (int, str)):
            raise TritonModelException("Correlation ID must be integer or string")
        self._inputs = list(inputs)
        self._request_id = request_id
        self._correlation_id = correlation_id
        self._requested = list(dict.fromkeys(requested_output_names))
        self._model_name = model_name
        self._model_version = model_version
        self._flags = flags
        self._timeout = timeout
        self._preferred_memory = preferred_memory or PreferredMemory()
        self._trace = trace if isinstance(trace, InferenceTrace) else InferenceTrace()
        self._parameters = _bls_parameters(parameters)
        self._sender = sender
        self._release_flags = TRITONSERVER_REQUEST_RELEASE_ALL

    @classmethod
    def _received(
        cls,
        inputs: list[Tensor],
        request_id: str,
        correlation_id: int | str,
        requested_output_names: list[str],
        flags: int,
        parameters: str,
        timeout: int,
        trace: InferenceTrace,
        sender: InferenceResponseSender,
    ) -> InferenceRequest:
        """A request from the server, as the worker builds it for ``execute``: the values
        are the server's, already checked, so none of the constructor's checks run."""
        request = cls.__new__(cls)
        request._inputs = inputs
        request._request_id = request_id
        request._correlation_id = correlation_id
        request._requested = (
            list(dict.fromkeys(requested_output_names))
            if len(requested_output_names) > 1
            else requested_output_names
        )
        request._model_name = ""
        request._model_version = -1
        request._flags = flags
        request._timeout = timeout
        request._preferred_memory = _NO_PREFERENCE
        request._trace = trace
        request._parameters = parameters
        request._sender = sender
        request._release_flags = TRITONSERVER_REQUEST_RELEASE_ALL
        return request

    def inputs(self) -> list[Tensor]:
        return self._inputs

    def request_id(self) -> str:
        return self._request_id

    def correlation_id(self) -> int | str:
        return self._correlation_id

    def requested_output_names(self) -> list[str]:
        return self._requested

    def flags(self) -> int:
        return self._flags

    def parameters(self) -> str:
        return self._parameters

    def trace(self) -> InferenceTrace:
        return self._trace

    def timeout(self) -> int:
        """The request's timeout in microseconds (its "timeout" parameter), 0 when the
        client gave none, as in Triton: not the queue policy's default."""
        return self._timeout

    def get_response_sender(self) -> InferenceResponseSender:
        if self._sender is None:
            raise TritonModelException("this request has no response sender")
        return self._sender

    def is_cancelled(self) -> bool:
        return self._sender is not None and self._sender.is_cancelled()

    def set_release_flags(self, flags: int) -> None:
        """``TRITONSERVER_REQUEST_RELEASE_RESCHEDULE``: once ``execute`` returns, the
        request goes back to the model's scheduler and reaches ``execute`` again (models
        with ``sequence_batching { iterative_sequence: true }``)."""
        self._release_flags = flags

    def release_flags(self) -> int:
        return self._release_flags

    def _bls_target(self) -> BlsTarget:
        return BlsTarget(
            self._model_name,
            self._model_version,
            self._request_id,
            self._correlation_id,
            self._flags,
            self._timeout,
            self._parameters,
            self._requested,
            self._trace._context,
        )

    def exec(self, decoupled: bool = False) -> Any:
        """Run this request on ``model_name`` through the server's scheduler for it. An
        error comes back as a response with ``has_error()``; ``decoupled=True`` returns
        an iterator over the responses, the last one marked final (possibly empty)."""
        executor = _bls_executor
        if executor is None:
            raise TritonModelException("BLS is only supported during the 'execute' function.")
        return executor(self, decoupled)

    def async_exec(self, decoupled: bool = False) -> Any:
        """``exec`` in the running loop's default executor, as Triton's stub runs it."""
        import asyncio

        return asyncio.get_running_loop().run_in_executor(None, self.exec, decoupled)


def get_input_tensor_by_name(inference_request: InferenceRequest, name: str) -> Tensor | None:
    for tensor in inference_request.inputs():
        if tensor.name() == name:
            return tensor
    return None


def get_output_tensor_by_name(inference_response: InferenceResponse, name: str) -> Tensor | None:
    for tensor in inference_response.output_tensors():
        if tensor.name() == name:
            return tensor
    return None


def get_input_config_by_name(model_config: ConfigDict, name: str) -> ConfigDict | None:
    for item in model_config.get("input", []):
        if item["name"] == name:
            return dict(item)
    return None


def get_output_config_by_name(model_config: ConfigDict, name: str) -> ConfigDict | None:
    for item in model_config.get("output", []):
        if item["name"] == name:
            return dict(item)
    return None


def using_decoupled_model_transaction_policy(model_config: ConfigDict) -> bool:
    return bool(model_config.get("model_transaction_policy", {}).get("decoupled", False))


class Logger:
    """``pb_utils.Logger.log_info(...)``: lines go to the server's stderr."""

    INFO = logging.INFO
    WARNING = logging.WARNING
    ERROR = logging.ERROR
    VERBOSE = logging.DEBUG
    _log = logging.getLogger("python_model")

    @staticmethod
    def log(message: str, level: int = logging.INFO) -> None:
        Logger._log.log(level, message)

    @staticmethod
    def log_info(message: str) -> None:
        Logger._log.info(message)

    @staticmethod
    def log_warn(message: str) -> None:
        Logger._log.warning(message)

    @staticmethod
    def log_error(message: str) -> None:
        Logger._log.error(message)

    @staticmethod
    def log_verbose(message: str) -> None:
        Logger._log.debug(message)
