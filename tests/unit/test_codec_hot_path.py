"""The request codec's fast paths give exactly what the plain ones gave.

Outputs that are untouched views of a request's bytes are sent as those bytes (no copy);
every other array goes through ``tobytes()``. Decoding reads each raw input once and keeps
shapes, parameters and typed contents as before.
"""

from __future__ import annotations

import numpy as np
import pytest

from inference import grpc_service_pb2 as pb
from service.errors import InvalidArgument
from service.grpc_frontend.codec import (
    decode_infer_request,
    decode_parameters,
    encode_infer_response,
    encode_parameters,
)
from service.types import InferResponse, OutputTensor, UInt64


def _encode(*arrays: np.ndarray, datatype: str = "FP32") -> pb.ModelInferResponse:
    outputs = [OutputTensor(f"OUTPUT{i}", datatype, a) for i, a in enumerate(arrays)]
    return encode_infer_response(InferResponse("m", "1", "id-1", outputs), 2**31 - 1)


def test_a_view_of_request_bytes_is_sent_as_those_bytes() -> None:
    data = np.arange(12, dtype="<f4").tobytes()
    view = np.frombuffer(data, np.float32).reshape(3, 4)
    message = _encode(view)
    assert message.raw_output_contents[0] == data
    assert list(message.outputs[0].shape) == [3, 4]
    assert (message.model_name, message.model_version, message.id) == ("m", "1", "id-1")


@pytest.mark.parametrize(
    "make",
    [
        lambda a: a[1:],  # part of the buffer
        lambda a: a.reshape(3, 4).T,  # not C-contiguous
        lambda a: a.reshape(3, 4)[:, ::2],  # strided
        lambda a: a + 1,  # a new array
    ],
)
def test_other_arrays_are_sent_in_c_order(make: object) -> None:
    data = np.arange(12, dtype="<f4").tobytes()
    array = make(np.frombuffer(data, np.float32))  # type: ignore[operator]
    message = _encode(array)
    assert message.raw_output_contents[0] == np.ascontiguousarray(array).tobytes()
    assert list(message.outputs[0].shape) == list(array.shape)


def test_bytes_outputs_are_length_prefixed() -> None:
    message = _encode(np.array([b"ab", b""], dtype=np.object_), datatype="BYTES")
    assert message.raw_output_contents[0] == b"\x02\x00\x00\x00ab\x00\x00\x00\x00"


def test_decode_keeps_every_field() -> None:
    request = pb.ModelInferRequest(model_name="m", model_version="2", id="r")
    request.inputs.add(name="A", datatype="FP32", shape=[1, 2])
    request.inputs.add(name="B", datatype="INT32", shape=[2]).contents.int_contents.extend([3, 4])
    request.inputs[0].parameters["p"].int64_param = 5
    request.outputs.add(name="OUT").parameters["classification"].int64_param = 2
    request.parameters["priority"].int64_param = 1
    request.raw_input_contents.append(b"\x00" * 8)
    with pytest.raises(InvalidArgument, match="contents field must not be specified"):
        decode_infer_request(request)  # typed contents beside raw_input_contents
    del request.raw_input_contents[:]
    request.inputs[0].contents.fp32_contents.extend([1.0, 2.0])
    decoded = decode_infer_request(request)
    assert (decoded.model_name, decoded.model_version, decoded.id) == ("m", "2", "r")
    a, b = decoded.inputs
    assert (a.name, a.datatype, a.shape, a.raw, a.parameters) == (
        "A",
        "FP32",
        (1, 2),
        None,
        {"p": 5},
    )
    assert a.contents is not None and a.contents.tolist() == [1.0, 2.0]
    assert b.contents is not None and b.contents.dtype == np.int32 and b.contents.tolist() == [3, 4]
    assert [(o.name, o.parameters) for o in decoded.outputs] == [("OUT", {"classification": 2})]
    assert decoded.parameters == {"priority": 1}


def test_decode_pairs_raw_inputs_in_order() -> None:
    request = pb.ModelInferRequest(model_name="m")
    request.inputs.add(name="A", datatype="FP32", shape=[2])
    request.inputs.add(name="B", datatype="FP32", shape=[1])
    request.raw_input_contents.extend([b"\x00" * 8, b"\x01" * 4, b"extra, ignored"])
    a, b = decode_infer_request(request).inputs
    assert (a.raw, b.raw) == (b"\x00" * 8, b"\x01" * 4)
    assert a.contents is None and a.parameters == {} and b.shape == (1,)
    del request.raw_input_contents[1:]
    with pytest.raises(InvalidArgument, match="unable to find data for input tensor 'B'"):
        decode_infer_request(request)


def test_parameters_keep_int64_and_uint64_apart() -> None:
    """Triton tells the two apart ('classification' takes only int64_param): a uint64
    parameter stays one through decode and encode, and an int too big for int64 goes
    out as uint64 instead of failing."""
    request = pb.ModelInferRequest()
    request.parameters["signed"].int64_param = -5
    request.parameters["unsigned"].uint64_param = 2**64 - 1
    request.parameters["small"].uint64_param = 7
    params = decode_parameters(request.parameters)
    assert params == {"signed": -5, "unsigned": 2**64 - 1, "small": 7}
    assert not isinstance(params["signed"], UInt64)
    assert isinstance(params["unsigned"], UInt64) and isinstance(params["small"], UInt64)
    response = pb.ModelInferResponse()
    encode_parameters(response.parameters, {**params, "big": 2**63})
    kinds = {k: v.WhichOneof("parameter_choice") for k, v in response.parameters.items()}
    assert kinds == {
        "signed": "int64_param",
        "unsigned": "uint64_param",
        "small": "uint64_param",
        "big": "uint64_param",
    }
    assert response.parameters["small"].uint64_param == 7
