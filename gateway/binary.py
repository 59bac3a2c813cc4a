"""The binary tensor data extension: JSON header + raw tensor bytes in one HTTP body.

``Inference-Header-Content-Length`` gives the JSON header's length; the inputs that carry
``binary_data_size`` take their bytes, in order, from what follows. A header length of 0
is Triton's raw binary request: the whole body is the data of the model's only input.
Each binary input is one slice of the body (protobuf takes bytes, not views).
"""

from __future__ import annotations

from inference import grpc_service_pb2 as pb

from .errors import GatewayError
from .tensors import DATATYPES, split_bytes

__all__ = [
    "HEADER_LENGTH",
    "BinaryReader",
    "header_length",
    "raw_binary_request",
    "response_headers",
]

#: The header naming the JSON part's length, lower-cased as ASGI delivers header names.
HEADER_LENGTH = "inference-header-content-length"


def header_length(body: bytes, header_value: str | None) -> int:
    """Length of the JSON header: the header's value, or the whole body without it."""
    if header_value is None:
        return len(body)
    try:
        length = int(header_value)
    except ValueError:
        raise GatewayError(
            400, f"Unable to parse Inference-Header-Content-Length, got: {header_value!r}"
        ) from None
    if length < 0 or length > len(body):
        raise GatewayError(
            400,
            f"inference header size should be in range (0, {len(body)}), got: {header_value}",
        )
    return length


class BinaryReader:
    """Hands out consecutive slices of the body after the JSON header, one per binary input."""

    def __init__(self, body: bytes, start: int, model_name: str) -> None:
        self._body = body
        self._offset = start
        self._model = model_name

    def take(self, size: int, input_name: str) -> bytes:
        end = self._offset + size
        if end > len(self._body):
            missing = end - len(self._body)
            raise GatewayError(
                400,
                f"unexpected size for input '{input_name}', expecting {missing} additional "
                f"bytes for model '{self._model}'",
            )
        chunk = self._body[self._offset : end]
        self._offset = end
        return chunk

    def finish(self) -> None:
        if self._offset != len(self._body):
            raise GatewayError(400, f"unexpected additional input data for model '{self._model}'")


def raw_binary_request(
    body: bytes, metadata: pb.ModelMetadataResponse, model_name: str, model_version: str
) -> pb.ModelInferRequest:
    """Header length 0: the body is the single input's data; its shape is deduced.

    The input's datatype comes from the model metadata; its dynamic dimensions become 1,
    except the last, which takes whatever element count the body holds.
    """
    if len(metadata.inputs) != 1:
        raise GatewayError(
            400,
            f"a raw binary request (Inference-Header-Content-Length: 0) needs a model with "
            f"exactly one input; '{model_name}' has {len(metadata.inputs)}",
        )
    spec = metadata.inputs[0]
    dtype = DATATYPES.get(spec.datatype)
    if spec.datatype == "BYTES":
        count = len(split_bytes(body, f"raw input '{spec.name}'"))
    elif dtype is None:
        raise GatewayError(400, f"input '{spec.name}' has unknown datatype {spec.datatype!r}")
    elif len(body) % dtype.itemsize:
        raise GatewayError(
            400,
            f"raw input '{spec.name}': {len(body)} bytes is not a whole number of "
            f"{spec.datatype} elements",
        )
    else:
        count = len(body) // dtype.itemsize
    shape = _deduce_shape(list(spec.shape), count, spec.name)
    request = pb.ModelInferRequest(model_name=model_name, model_version=model_version)
    request.inputs.add(name=spec.name, datatype=spec.datatype, shape=shape)
    request.raw_input_contents.append(body)
    return request


def _deduce_shape(dims: list[int], count: int, name: str) -> list[int]:
    dynamic = [i for i, d in enumerate(dims) if d < 0]
    if not dynamic:
        return dims
    known = 1
    for d in dims:
        if d >= 0:
            known *= d
    if known == 0 or count % known:
        raise GatewayError(
            400, f"raw input '{name}': {count} elements do not fit the model's shape {dims}"
        )
    shape = [1 if d < 0 else d for d in dims]
    shape[dynamic[-1]] = count // known
    return shape


def response_headers(json_length: int, has_binary: bool) -> list[tuple[bytes, bytes]]:
    """Content-Type (and the header length when binary outputs follow the JSON)."""
    if not has_binary:
        return [(b"content-type", b"application/json")]
    return [
        (b"content-type", b"application/octet-stream"),
        (HEADER_LENGTH.encode("ascii"), str(json_length).encode("ascii")),
    ]
