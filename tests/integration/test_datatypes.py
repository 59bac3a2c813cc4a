"""Every v2 datatype round-trips unchanged through an identity model.

One repository holds ``identity_<type>`` (OUTPUT0 = INPUT0, shape [batch, 4]) for each
datatype. Values are sent with tritonclient (raw_input_contents) and, for the types that have
one, through the typed ``contents`` field of hand-crafted requests; outputs always come back
as raw bytes and are compared bit for bit (NaN, -0.0 and subnormals included).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import ml_dtypes
import models
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from integration_support import (
    bytes_array,
    decode_output,
    expect_rpc_error,
    grpc_stub,
    infer_input,
    raw_tensor,
    running_server,
)
from server_process import ServerProcess
from tritonclient.grpc import model_config_pb2 as mc
from tritonclient.grpc import service_pb2
from tritonclient.utils import deserialize_bytes_tensor

F32 = np.finfo(np.float32)
F64 = np.finfo(np.float64)
F16 = np.finfo(np.float16)

# datatype -> a [2, 4] array of edge values in the dtype tritonclient uses for it.
VALUES: dict[str, np.ndarray] = {
    "BOOL": np.array([[True, False, True, True], [False, False, True, False]]),
    "UINT8": np.array([[0, 1, 127, 255], [128, 254, 2, 3]], dtype=np.uint8),
    "UINT16": np.array([[0, 1, 65535, 256], [32768, 7, 8, 9]], dtype=np.uint16),
    "UINT32": np.array([[0, 1, 2**32 - 1, 2**31], [65536, 5, 6, 7]], dtype=np.uint32),
    "UINT64": np.array([[0, 1, 2**64 - 1, 2**63], [2**32, 5, 6, 7]], dtype=np.uint64),
    "INT8": np.array([[-128, -1, 0, 127], [1, 2, -3, 4]], dtype=np.int8),
    "INT16": np.array([[-32768, -1, 0, 32767], [256, -256, 3, 4]], dtype=np.int16),
    "INT32": np.array([[-(2**31), -1, 0, 2**31 - 1], [65536, -65536, 3, 4]], dtype=np.int32),
    "INT64": np.array([[-(2**63), -1, 0, 2**63 - 1], [2**40, -(2**40), 3, 4]], dtype=np.int64),
    "FP16": np.array(
        [[F16.max, -F16.max, -0.0, F16.smallest_subnormal], [np.inf, -np.inf, np.nan, 0.333]],
        dtype=np.float16,
    ),
    "FP32": np.array(
        [[F32.max, F32.tiny, -0.0, F32.smallest_subnormal], [np.inf, -np.inf, np.nan, 0.1]],
        dtype=np.float32,
    ),
    "FP64": np.array(
        [[F64.max, F64.tiny, -0.0, F64.smallest_subnormal], [np.inf, -np.inf, np.nan, 0.1]],
        dtype=np.float64,
    ),
    # tritonclient 2.73 takes and returns BF16 as ml_dtypes.bfloat16 (no longer float32).
    "BF16": np.array(
        [[1.0, -2.5, 0.15625, 65536.0], [np.inf, -np.inf, np.nan, -0.0]], dtype=ml_dtypes.bfloat16
    ),
    # ONNX Runtime string tensors need UTF-8; empty and long strings are fine.
    "BYTES": bytes_array(
        ["", "hello", "straße é", "x" * 1000, "tab\tnew\nline", "😀", "a", "Z"]
    ).reshape(2, 4),
}
DATATYPES = list(VALUES)

# datatype -> (InferTensorContents field, numpy dtype of the raw output)
CONTENTS: dict[str, tuple[str, Any]] = {
    "BOOL": ("bool_contents", np.bool_),
    "UINT8": ("uint_contents", np.uint8),
    "UINT16": ("uint_contents", np.uint16),
    "UINT32": ("uint_contents", np.uint32),
    "UINT64": ("uint64_contents", np.uint64),
    "INT8": ("int_contents", np.int8),
    "INT16": ("int_contents", np.int16),
    "INT32": ("int_contents", np.int32),
    "INT64": ("int64_contents", np.int64),
    "FP32": ("fp32_contents", np.float32),
    "FP64": ("fp64_contents", np.float64),
    "BYTES": ("bytes_contents", np.object_),
}


def _model(datatype: str) -> str:
    return f"identity_{datatype.lower()}"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo: Path = tmp_path_factory.mktemp("datatypes_repo")
    for datatype in DATATYPES:
        name = _model(datatype)
        models.write_model(
            repo,
            name,
            models.identity_model(datatype, ["batch", 4]),
            models.make_config(
                name, [("INPUT0", datatype, [4])], [("OUTPUT0", datatype, [4])], max_batch_size=8
            ),
        )
    with running_server([repo]) as s:
        yield s


@pytest.fixture(scope="module")
def client(server: ServerProcess) -> Iterator[grpcclient.InferenceServerClient]:
    with grpcclient.InferenceServerClient(server.url) as c:
        yield c


def _same_bits(got: np.ndarray, expected: np.ndarray) -> None:
    assert got.shape == expected.shape
    if expected.dtype == np.object_:
        assert got.dtype == np.object_
        assert list(got.ravel()) == list(expected.ravel())
        return
    assert got.dtype == expected.dtype, (got.dtype, expected.dtype)
    width = expected.dtype.itemsize
    as_uint = np.dtype(f"u{width}")
    np.testing.assert_array_equal(got.view(as_uint), expected.view(as_uint))


@pytest.mark.parametrize("datatype", DATATYPES)
def test_metadata_and_config(client: grpcclient.InferenceServerClient, datatype: str) -> None:
    name = _model(datatype)
    assert client.is_model_ready(name) is True
    meta = client.get_model_metadata(name)
    assert [(t.name, t.datatype, list(t.shape)) for t in meta.inputs] == [
        ("INPUT0", datatype, [-1, 4])
    ]
    assert [(t.name, t.datatype, list(t.shape)) for t in meta.outputs] == [
        ("OUTPUT0", datatype, [-1, 4])
    ]
    config = client.get_model_config(name).config
    config_type = "TYPE_STRING" if datatype == "BYTES" else f"TYPE_{datatype}"
    assert mc.DataType.Name(config.input[0].data_type) == config_type
    assert mc.DataType.Name(config.output[0].data_type) == config_type


@pytest.mark.parametrize("datatype", DATATYPES)
def test_round_trip_tritonclient(client: grpcclient.InferenceServerClient, datatype: str) -> None:
    values = VALUES[datatype]
    result = client.infer(_model(datatype), [infer_input("INPUT0", values, datatype)])
    output = result.get_response().outputs[0]
    assert (output.name, output.datatype, list(output.shape)) == ("OUTPUT0", datatype, [2, 4])
    _same_bits(result.as_numpy("OUTPUT0"), values)
    # One row only: the batch dimension follows the request.
    row = values[1:]
    result = client.infer(_model(datatype), [infer_input("INPUT0", row, datatype)])
    _same_bits(result.as_numpy("OUTPUT0"), row)


def test_bf16_from_truncated_float32(server: ServerProcess) -> None:
    """The pre-ml_dtypes client convention: BF16 raw data is the top 16 bits of float32."""
    floats = np.array([[1.0078125 + 2**-9, -3.14159, 1e-3, 3.0e38]], dtype=np.float32)
    bits = (floats.view(np.uint32) >> 16).astype(np.uint16)
    request = service_pb2.ModelInferRequest(
        model_name="identity_bf16",
        inputs=[raw_tensor("INPUT0", "BF16", [1, 4])],
        raw_input_contents=[bits.tobytes()],
    )
    with grpc_stub(server.url) as stub:
        response = stub.ModelInfer(request, timeout=30)
    assert response.outputs[0].datatype == "BF16"
    returned = decode_output(response, "OUTPUT0", np.uint16)
    np.testing.assert_array_equal(returned, bits)
    truncated = (returned.astype(np.uint32) << 16).view(np.float32)
    np.testing.assert_array_equal(
        truncated, (floats.view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32)
    )
    np.testing.assert_allclose(truncated, floats, rtol=2**-7)  # bf16 keeps 8 significant bits


@pytest.mark.parametrize("datatype", list(CONTENTS))
def test_round_trip_typed_contents(server: ServerProcess, datatype: str) -> None:
    field, np_dtype = CONTENTS[datatype]
    values = VALUES[datatype]
    flat = [bool(v) for v in values.ravel()] if datatype == "BOOL" else values.ravel().tolist()
    request = service_pb2.ModelInferRequest(
        model_name=_model(datatype),
        id=f"contents-{datatype}",
        inputs=[raw_tensor("INPUT0", datatype, [2, 4], **{field: flat})],
    )
    with grpc_stub(server.url) as stub:
        response = stub.ModelInfer(request, timeout=30)
    assert response.id == f"contents-{datatype}"
    assert (response.outputs[0].datatype, list(response.outputs[0].shape)) == (datatype, [2, 4])
    assert len(response.raw_output_contents) == 1
    if datatype == "BYTES":
        got = deserialize_bytes_tensor(response.raw_output_contents[0]).reshape(2, 4)
    else:
        got = decode_output(response, "OUTPUT0", np_dtype)
    _same_bits(got, values)


@pytest.mark.parametrize("datatype", ["FP16", "BF16"])
def test_no_contents_field_types_refuse_contents(server: ServerProcess, datatype: str) -> None:
    request = service_pb2.ModelInferRequest(
        model_name=_model(datatype),
        inputs=[raw_tensor("INPUT0", datatype, [1, 4], fp32_contents=[1.0, 2.0, 3.0, 4.0])],
    )
    with grpc_stub(server.url) as stub:
        expect_rpc_error(
            lambda: stub.ModelInfer(request, timeout=30),
            grpc.StatusCode.INVALID_ARGUMENT,
            f"unexpected explicit tensor data for input tensor 'INPUT0' for model "
            f"'{_model(datatype)}' of type 'FP32', expected datatype '{datatype}'",
        )


def test_wider_contents_field_is_refused(server: ServerProcess) -> None:
    """INT8 travels in int_contents; int64_contents is the wrong field for it."""
    request = service_pb2.ModelInferRequest(
        model_name="identity_int8",
        inputs=[raw_tensor("INPUT0", "INT8", [1, 4], int64_contents=[1, 2, 3, 4])],
    )
    with grpc_stub(server.url) as stub:
        expect_rpc_error(
            lambda: stub.ModelInfer(request, timeout=30),
            grpc.StatusCode.INVALID_ARGUMENT,
            "unexpected explicit tensor data for input tensor 'INPUT0' for model "
            "'identity_int8' of type 'INT64', expected datatype 'INT8'",
        )
