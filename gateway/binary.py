"""The binary tensor data extension: JSON header + raw tensor bytes in one HTTP body.

``Inference-Header-Content-Length`` gives the JSON header's length; the inputs that carry
``binary_data_size`` take their bytes, in order, from what follows. A header length of 0
(or an empty body without the header) is Triton's raw binary request: the whole body is
the data of the model's only input. Each binary input is one slice of the body (protobuf
takes bytes, not views).
"""

from __future__ import annotations

import re

from inference import grpc_service_pb2 as pb
from inference.model_config_pb2 import DataType, ModelConfig
from wire.datatypes import serialize_bytes_tensor

from .errors import GatewayError
from .tensors import DATATYPES

__all__ = [
    "HEADER_LENGTH",
    "BinaryReader",
    "header_length",
    "raw_binary_parts",
    "raw_binary_request",
    "response_headers",
]

#: The header naming the JSON part's length, lower-cased as the HTTP layer delivers names.
HEADER_LENGTH = "inference-header-content-length"
_ATOI = re.compile(r"\s*([+-]?\d+)")


def header_length(body: bytes | bytearray, header_value: str | None) -> int:
    """Length of the JSON header: the header's value (read as C's ``atoi`` reads it, as
    Triton does: a value that is not a number is 0), or the whole body without it."""
    if header_value is None:
        return len(body)
    match = _ATOI.match(header_value)
    length = int(match.group(1)) if match else 0
    if length < 0 or length > len(body):
        raise GatewayError(
            400,
            f"inference header size should be in range (0, {len(body)}), got: {header_value}",
        )
    return length


class BinaryReader:
    """Hands out consecutive slices of the body after the JSON header, one per binary input."""

    def __init__(self, body: bytes | bytearray, start: int, model_name: str) -> None:
        self._body = body
        self._offset = start
        self._model = model_name

    def take(self, size: int, input_name: str) -> memoryview:
        """The next ``size`` bytes of the body, uncopied."""
        end = self._offset + size
        if end > len(self._body):
            missing = end - len(self._body)
            raise GatewayError(
                400,
                f"unexpected size for input '{input_name}', expecting {missing} additional "
                f"bytes for model '{self._model}'",
            )
        chunk = memoryview(self._body)[self._offset : end]
        self._offset = end
        return chunk

    def finish(self) -> None:
        if self._offset != len(self._body):
            raise GatewayError(400, f"unexpected additional input data for model '{self._model}'")


def raw_binary_request(
    body: bytes, config: ModelConfig, model_name: str, model_version: str
) -> pb.ModelInferRequest:
    """``raw_binary_parts`` as one message."""
    request, raw = raw_binary_parts(body, config, model_name, model_version)
    request.raw_input_contents.append(bytes(raw))
    return request


def raw_binary_parts(
    body: bytes | bytearray, config: ModelConfig, model_name: str, model_version: str
) -> tuple[pb.ModelInferRequest, bytes | memoryview]:
    """(the request without its data, the data). Header length 0: the body is the data
    of the model's only input, shaped from its configuration as Triton's core does
    (``InferenceRequest::Normalize``): a batch dimension of 1 if the model batches, and
    the one variable dimension (if any) takes whatever the body holds. A BYTES input must
    have shape [1]; the body is its one element. The error texts are Triton's."""
    prefix = "[request id: <id_unknown>] "
    if len(config.input) != 1:
        raise GatewayError(
            400,
            f"{prefix}Raw request must only have 1 input (found 1) to be deduced but got "
            f"{len(config.input)} inputs in '{model_name}' model configuration",
        )
    spec = config.input[0]
    shape = [1] if config.max_batch_size != 0 else []
    dynamic = -1
    count = 1
    for dim in spec.dims:
        if dim == -1:
            if dynamic != -1:
                raise GatewayError(
                    400,
                    f"{prefix}The shape of the raw input '{spec.name}' can not be deduced "
                    "because there are more than one variable-sized dimension",
                )
            dynamic = len(shape)
        else:
            count *= dim
        shape.append(dim)
    datatype = DataType.Name(spec.data_type).removeprefix("TYPE_")
    if datatype == "STRING":
        datatype = "BYTES"
        if dynamic != -1 or count != 1:
            raise GatewayError(
                400,
                f"{prefix}For BYTE datatype raw input '{spec.name}', the model must have "
                "input shape [1]",
            )
        body = serialize_bytes_tensor([bytes(body)])
    elif dynamic != -1:
        dtype = DATATYPES.get(datatype)
        size = count * (dtype.itemsize if dtype is not None else 1)
        shape[dynamic] = len(body) // size if size else 0
    request = pb.ModelInferRequest(model_name=model_name, model_version=model_version)
    request.inputs.add(name=spec.name, datatype=datatype, shape=shape)
    return request, body if isinstance(body, bytes) else memoryview(body)  # uncopied


def response_headers(json_length: int, has_binary: bool) -> list[tuple[bytes, bytes]]:
    """Content-Type (and the header length when binary outputs follow the JSON)."""
    if not has_binary:
        return [(b"content-type", b"application/json")]
    return [
        (b"content-type", b"application/octet-stream"),
        (HEADER_LENGTH.encode("ascii"), str(json_length).encode("ascii")),
    ]
