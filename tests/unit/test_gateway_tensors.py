"""JSON/binary tensor conversion of the gateway (gateway/tensors.py, binary.py, v2_json.py)."""

from __future__ import annotations

import json
import struct
from typing import Any

import numpy as np
import orjson
import pytest

from gateway.binary import BinaryReader, header_length, raw_binary_request, response_headers
from gateway.errors import GatewayError
from gateway.tensors import json_to_raw, raw_to_json, split_bytes
from gateway.v2_json import decode_infer, encode_infer
from inference import grpc_service_pb2 as pb
from inference import model_config_pb2 as mc
from wire.datatypes import bf16_bits, bf16_to_float32
from wire.datatypes import serialize_bytes_tensor as serialize_bytes

# datatype -> (JSON data, the numpy array it must become)
NUMERIC: dict[str, tuple[list[Any], np.ndarray]] = {
    "BOOL": ([[True, False], [False, True]], np.array([1, 0, 0, 1], np.bool_)),
    "UINT8": ([[0, 255], [1, 2]], np.array([0, 255, 1, 2], np.uint8)),
    "UINT16": ([0, 65535, 3, 4], np.array([0, 65535, 3, 4], np.uint16)),
    "UINT32": ([0, 2**32 - 1, 3, 4], np.array([0, 2**32 - 1, 3, 4], np.uint32)),
    "UINT64": ([[0, 2**64 - 1], [2**63, 7]], np.array([0, 2**64 - 1, 2**63, 7], np.uint64)),
    "INT8": ([-128, 127, 0, -1], np.array([-128, 127, 0, -1], np.int8)),
    "INT16": ([-32768, 32767, 0, -1], np.array([-32768, 32767, 0, -1], np.int16)),
    "INT32": ([-(2**31), 2**31 - 1, 0, -1], np.array([-(2**31), 2**31 - 1, 0, -1], np.int32)),
    "INT64": ([[-(2**63), 2**63 - 1], [0, -1]], np.array([-(2**63), 2**63 - 1, 0, -1], np.int64)),
    "FP16": ([0.5, -1, 65504, 1e-7], np.array([0.5, -1, 65504, 1e-7], np.float16)),
    "FP32": ([[0.1, -2], [3.0e38, 1]], np.array([0.1, -2, 3.0e38, 1], np.float32)),
    "FP64": ([0.1, -2, 1e300, 5e-324], np.array([0.1, -2, 1e300, 5e-324], np.float64)),
}


@pytest.mark.parametrize("datatype", list(NUMERIC))
def test_json_to_raw_and_back(datatype: str) -> None:
    data, expected = NUMERIC[datatype]
    raw = json_to_raw(data, datatype, [2, 2], "t")
    assert raw == expected.astype(expected.dtype.newbyteorder("<")).tobytes()
    back = raw_to_json(raw, datatype, [2, 2], "t")
    assert isinstance(back, np.ndarray)  # numpy all the way, orjson writes it
    np.testing.assert_array_equal(back, expected)
    # what goes on the wire is a flat JSON array of the same values
    assert (
        np.array(
            orjson.loads(orjson.dumps(back, option=orjson.OPT_SERIALIZE_NUMPY)),
            dtype=expected.dtype,
        ).tolist()
        == expected.tolist()
    )


def test_bf16_rounds_to_nearest_even_and_back() -> None:
    values = np.array([1.0, -2.5, 1.00390625, 1.01171875, 3.0e38, np.inf, np.nan], np.float32)
    bits = bf16_bits(values)
    assert bits.dtype == np.uint16
    assert bits[:5].tolist() == [0x3F80, 0xC020, 0x3F80, 0x3F82, 0x7F62]  # ties go to even
    back = bf16_to_float32(bits)
    assert back[:2].tolist() == [1.0, -2.5] and np.isinf(back[5]) and np.isnan(back[6])
    raw = json_to_raw([1.0, -2.5], "BF16", [2], "t")
    assert raw == struct.pack("<2H", 0x3F80, 0xC020)
    assert raw_to_json(raw, "BF16", [2], "t").tolist() == [1.0, -2.5]


def test_bytes_tensors() -> None:
    raw = json_to_raw([["a", "é"], ["", "xyz"]], "BYTES", [2, 2], "t")
    assert raw == serialize_bytes([b"a", "é".encode(), b"", b"xyz"])
    assert split_bytes(raw, "t") == [b"a", "é".encode(), b"", b"xyz"]
    assert raw_to_json(raw, "BYTES", [4], "t") == ["a", "é", "", "xyz"]
    with pytest.raises(GatewayError, match="binary_data"):
        raw_to_json(serialize_bytes([b"\xff"]), "BYTES", [1], "out")
    with pytest.raises(GatewayError, match="truncated"):
        split_bytes(b"\x05\x00", "t")
    with pytest.raises(GatewayError, match="overruns"):
        split_bytes(b"\x05\x00\x00\x00ab", "t")


NOT = "Unable to parse 'data': attempt to access JSON non-"
SHAPE = "Unable to parse 'data': Shape does not match true shape of 'data' field"


@pytest.mark.parametrize(
    ("data", "datatype", "shape", "message"),
    [
        ([1, 2], "FP32", [3], SHAPE),
        ([[1, 2], [3], [4]], "FP32", [3], SHAPE),
        (["1", "2"], "INT32", [2], NOT + "signed-integer as signed-integer"),
        ([1.5, 2], "INT32", [2], NOT + "signed-integer as signed-integer"),
        ([True, 1], "BOOL", [2], NOT + "boolean as boolean"),
        ([1, 0], "BOOL", [2], NOT + "boolean as boolean"),
        ([True, False], "INT8", [2], NOT + "signed-integer as signed-integer"),
        ([-1, 2], "UINT32", [2], NOT + "unsigned-integer as unsigned-integer"),
        ([2**64, 1], "UINT64", [2], NOT + "unsigned-integer as unsigned-integer"),
        ([None, 1.0], "FP64", [2], NOT + "number as double"),
        (
            [1, "a"],
            "BYTES",
            [2],
            "Unable to parse JSON bytes array: attempt to access JSON non-string as string",
        ),
        ({"a": 1}, "FP32", [1], NOT + "array as array"),
        ([1, 300], "INT8", [2], "input 'X': value out of range for INT8 [-128, 127]"),
    ],
)
def test_bad_json_data_has_tritons_texts(
    data: Any, datatype: str, shape: list[int], message: str
) -> None:
    with pytest.raises(GatewayError) as info:
        json_to_raw(data, datatype, shape, "input 'X'")
    assert (info.value.status, info.value.message) == (400, message)


def test_json_data_as_triton_reads_it() -> None:
    # Ragged nesting is read element by element; an empty tensor's data is not read.
    assert json_to_raw([[1, 2], [3]], "INT32", [3], "x") == np.array([1, 2, 3], "<i4").tobytes()
    assert json_to_raw("anything", "FP32", [0, 4], "x") == b""


def test_empty_tensors() -> None:
    assert json_to_raw([], "FP32", [0, 4], "t") == b""
    assert raw_to_json(b"", "FP32", [0], "t").tolist() == []


def test_no_per_element_python_objects_for_numbers() -> None:
    """Decoded outputs are numpy views of the raw bytes, not lists of Python floats."""
    raw = np.arange(1000, dtype=np.float32).tobytes()
    out = raw_to_json(raw, "FP32", [10, 100], "t")
    assert isinstance(out, np.ndarray) and out.base is not None  # a view, no copy


# --------------------------------------------------------------------------- binary framing


def test_header_length_reads_the_value_as_triton_does() -> None:
    assert header_length(b"abc", None) == 3
    assert header_length(b"abc", "2") == 2
    assert header_length(b"abc", " 2x") == 2  # C atoi: leading digits
    assert header_length(b"abc", "x") == 0  # no digits: 0, a raw binary request
    for bad in ("-1", "4"):
        with pytest.raises(GatewayError) as info:
            header_length(b"abc", bad)
        assert info.value.message == f"inference header size should be in range (0, 3), got: {bad}"


def test_binary_reader() -> None:
    reader = BinaryReader(b"HEADabcdef", 4, "m")
    assert reader.take(2, "a") == b"ab"
    assert reader.take(0, "b") == b""
    with pytest.raises(GatewayError, match="unexpected additional input data"):
        reader.finish()
    with pytest.raises(GatewayError, match="expecting 1 additional bytes"):
        reader.take(5, "c")


def test_response_headers() -> None:
    assert response_headers(10, False) == [(b"content-type", b"application/json")]
    assert (b"inference-header-content-length", b"10") in response_headers(10, True)


def _config(*inputs: tuple[str, str, list[int]], max_batch_size: int = 0) -> Any:
    config = mc.ModelConfig(name="m", max_batch_size=max_batch_size)
    for name, datatype, dims in inputs:
        config.input.add(name=name, data_type=mc.DataType.Value(datatype), dims=dims)
    return config


def test_raw_binary_request_shapes_as_triton_does() -> None:
    body = np.arange(8, dtype=np.float32).tobytes()
    request = raw_binary_request(body, _config(("x", "TYPE_FP32", [-1, 4])), "m", "")
    assert list(request.inputs[0].shape) == [2, 4]
    assert request.inputs[0].datatype == "FP32"
    assert request.raw_input_contents[0] == body
    request = raw_binary_request(
        body, _config(("x", "TYPE_FP32", [-1]), max_batch_size=8), "m", "2"
    )
    assert list(request.inputs[0].shape) == [1, 8] and request.model_version == "2"
    request = raw_binary_request(body, _config(("x", "TYPE_FP32", [8])), "m", "")
    assert list(request.inputs[0].shape) == [8]


def test_raw_binary_bytes_input_is_the_one_element() -> None:
    request = raw_binary_request(b"427", _config(("s", "TYPE_STRING", [1])), "m", "")
    assert request.inputs[0].datatype == "BYTES" and list(request.inputs[0].shape) == [1]
    assert request.raw_input_contents[0] == serialize_bytes([b"427"])
    request = raw_binary_request(b"", _config(("s", "TYPE_STRING", [1]), max_batch_size=4), "m", "")
    assert list(request.inputs[0].shape) == [1, 1]
    assert request.raw_input_contents[0] == serialize_bytes([b""])


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (
            _config(("a", "TYPE_FP32", [-1]), ("b", "TYPE_FP32", [-1]), ("c", "TYPE_FP32", [-1])),
            "[request id: <id_unknown>] Raw request must only have 1 input (found 1) to be "
            "deduced but got 3 inputs in 'm' model configuration",
        ),
        (
            _config(("x", "TYPE_FP16", [-1, -1])),
            "[request id: <id_unknown>] The shape of the raw input 'x' can not be deduced "
            "because there are more than one variable-sized dimension",
        ),
        (
            _config(("s", "TYPE_STRING", [-1])),
            "[request id: <id_unknown>] For BYTE datatype raw input 's', the model must have "
            "input shape [1]",
        ),
    ],
)
def test_raw_binary_refusals_are_triton_texts(config: Any, message: str) -> None:
    with pytest.raises(GatewayError) as info:
        raw_binary_request(b"1234", config, "m", "")
    assert (info.value.status, info.value.message) == (400, message)


# --------------------------------------------------------------------------- v2 JSON codec


def _decode(doc: Any, binary: bytes = b"") -> Any:
    header = json.dumps(doc).encode()
    return decode_infer(doc, BinaryReader(header + binary, len(header), "m"), "m", "")


def test_decode_infer_request() -> None:
    doc = {
        "id": "r1",
        "parameters": {
            "priority": 2,
            "binary_data_output": True,
            "flag": True,
            "s": "x",
            "big": 2**64 - 1,
            "f": 0.5,
        },
        "inputs": [
            {"name": "A", "shape": [2], "datatype": "INT32", "data": [1, 2]},
            {"name": "B", "shape": [2], "datatype": "FP32", "parameters": {"binary_data_size": 8}},
        ],
        "outputs": [{"name": "O", "parameters": {"binary_data": False, "classification": 2}}],
    }
    call = _decode(doc, np.array([1.5, 2.5], np.float32).tobytes())
    request = call.request
    assert (request.model_name, request.id) == ("m", "r1")
    assert request.parameters["priority"].int64_param == 2
    assert request.parameters["big"].uint64_param == 2**64 - 1
    assert request.parameters["f"].double_param == 0.5
    assert "binary_data_output" not in request.parameters  # consumed by the gateway
    assert [t.name for t in request.inputs] == ["A", "B"]
    assert "binary_data_size" not in request.inputs[1].parameters
    assert request.raw_input_contents[0] == np.array([1, 2], "<i4").tobytes()
    assert request.raw_input_contents[1] == np.array([1.5, 2.5], "<f4").tobytes()
    assert request.outputs[0].parameters["classification"].int64_param == 2
    assert call.default_binary is True
    assert call.output_is_binary("O") is False and call.output_is_binary("other") is True


def test_shared_memory_inputs_are_forwarded() -> None:
    doc = {
        "inputs": [
            {
                "name": "A",
                "shape": [1],
                "datatype": "FP32",
                "parameters": {"shared_memory_region": "r", "shared_memory_byte_size": 4},
            }
        ]
    }
    request = _decode(doc).request
    assert request.inputs[0].parameters["shared_memory_region"].string_param == "r"
    assert request.inputs[0].parameters["shared_memory_byte_size"].int64_param == 4
    assert list(request.raw_input_contents) == []  # the service reads the region


def _response() -> pb.ModelInferResponse:
    response = pb.ModelInferResponse(model_name="m", model_version="1", id="r1")
    response.parameters["sequence_id"].int64_param = 5
    response.outputs.add(name="F", datatype="FP32", shape=[2])
    response.raw_output_contents.append(np.array([1.5, -2], np.float32).tobytes())
    response.outputs.add(name="S", datatype="BYTES", shape=[1])
    response.raw_output_contents.append(serialize_bytes([b"hi"]))
    return response


def test_encode_infer_json() -> None:
    call = _decode({"inputs": []})
    head, parts = encode_infer(_response(), call)
    assert parts == []
    assert json.loads(head) == {
        "id": "r1",
        "model_name": "m",
        "model_version": "1",
        "parameters": {"sequence_id": 5},
        "outputs": [
            {"name": "F", "datatype": "FP32", "shape": [2], "data": [1.5, -2.0]},
            {"name": "S", "datatype": "BYTES", "shape": [1], "data": ["hi"]},
        ],
    }


def test_encode_infer_binary_and_mixed() -> None:
    call = _decode(
        {
            "inputs": [],
            "outputs": [{"name": "F", "parameters": {"binary_data": True}}, {"name": "S"}],
        }
    )
    head, parts = encode_infer(_response(), call)
    outputs = json.loads(head)["outputs"]
    assert outputs[0]["parameters"] == {"binary_data_size": 8} and "data" not in outputs[0]
    assert outputs[1]["data"] == ["hi"]
    assert parts == [np.array([1.5, -2], np.float32).tobytes()]


def test_encode_typed_contents_outputs() -> None:
    """Outputs in typed contents (not raw) are read too."""
    response = pb.ModelInferResponse(model_name="m", model_version="1")
    out = response.outputs.add(name="I", datatype="INT32", shape=[3])
    out.contents.int_contents.extend([1, -2, 3])
    head, _ = encode_infer(response, _decode({"inputs": []}))
    assert json.loads(head)["outputs"][0]["data"] == [1, -2, 3]
