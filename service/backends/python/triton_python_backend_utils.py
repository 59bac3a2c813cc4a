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
from typing import Any

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

__all__ = [
    "TRITONSERVER_REQUEST_FLAG_SEQUENCE_END",
    "TRITONSERVER_REQUEST_FLAG_SEQUENCE_START",
    "TRITONSERVER_REQUEST_RELEASE_ALL",
    "TRITONSERVER_REQUEST_RELEASE_RESCHEDULE",
    "TRITONSERVER_RESPONSE_COMPLETE_FINAL",
    "TRITON_STRING_TO_NUMPY",
    "InferenceRequest",
    "InferenceResponse",
    "InferenceResponseSender",
    "Logger",
    "ModelConfig",
    "Tensor",
    "TritonError",
    "TritonModelException",
    "deserialize_bytes_tensor",
    "get_input_config_by_name",
    "get_input_tensor_by_name",
    "get_output_config_by_name",
    "get_output_tensor_by_name",
    "numpy_to_triton_type",
    "serialize_byte_tensor",
    "triton_string_to_numpy",
    "triton_to_numpy_type",
    "using_decoupled_model_transaction_policy",
]

ConfigDict = dict[str, Any]

TRITONSERVER_REQUEST_FLAG_SEQUENCE_START = 1
TRITONSERVER_REQUEST_FLAG_SEQUENCE_END = 2
TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1
TRITONSERVER_REQUEST_RELEASE_ALL = 1
TRITONSERVER_REQUEST_RELEASE_RESCHEDULE = 2


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
            parameters if isinstance(parameters, str) else json.dumps(parameters or {})
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


class InferenceRequest:
    """A request as ``execute`` receives it. Building one to run another model (BLS,
    ``InferenceRequest(...).exec()``) is not supported by this server."""

    def __init__(
        self,
        inputs: Sequence[Tensor],
        request_id: str = "",
        correlation_id: int | str = 0,
        requested_output_names: Sequence[str] = (),
        flags: int = 0,
        parameters: str = "{}",
        sender: InferenceResponseSender | None = None,
        timeout: int = 0,
    ) -> None:
        self._inputs = list(inputs)
        self._request_id = request_id
        self._correlation_id = correlation_id
        self._requested = list(requested_output_names)
        self._flags = flags
        self._parameters = parameters
        self._sender = sender
        self._timeout = timeout
        self._release_flags = TRITONSERVER_REQUEST_RELEASE_ALL

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

    def exec(self, decoupled: bool = False) -> Any:
        raise TritonModelException(
            "BLS (InferenceRequest.exec) is not supported by this server's python backend"
        )

    async def async_exec(self, decoupled: bool = False) -> Any:
        return self.exec(decoupled)


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
