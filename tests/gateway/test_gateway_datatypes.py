"""Every v2 datatype through the gateway: JSON numbers/strings and binary, bit for bit.

One repository holds ``identity_<type>`` (OUTPUT0 = INPUT0, shape [batch, 4]) per
datatype. Binary mode must return exactly the bytes sent; JSON mode must return the
values sent (FP16 and BF16 as JSON numbers, BYTES as strings, NaN/inf as null).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import ml_dtypes
import models
import numpy as np
import pytest
import tritonclient.http as httpclient
from conftest import running_gateway
from gateway_process import GatewayProcess, http_request
from server_process import ServerProcess

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
    "FP16": np.array([[65504.0, -65504.0, -0.0, 6e-8], [0.5, 0.25, 1.5, 0.333]], dtype=np.float16),
    "FP32": np.array([[3.4e38, 1.2e-38, -0.0, 1e-45], [0.1, -2.5, 7.0, 1e10]], dtype=np.float32),
    "FP64": np.array(
        [[1.7e308, 2.2e-308, -0.0, 5e-324], [0.1, -2.5, 7.0, 1e100]], dtype=np.float64
    ),
    "BF16": np.array(
        [[1.0, -2.5, 0.15625, 65536.0], [3.0e38, -0.0, 1e-3, 7.0]], dtype=ml_dtypes.bfloat16
    ),
    "BYTES": np.array(
        ["", "hello", "straße é", "x" * 1000, "tab\tnew\nline", "😀", "a", "Z"], dtype=object
    ).reshape(2, 4),
}
DATATYPES = list(VALUES)


def _model(datatype: str) -> str:
    return f"identity_{datatype.lower()}"


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    repo: Path = tmp_path_factory.mktemp("gateway_datatypes")
    for datatype in DATATYPES:
        name = _model(datatype)
        config = models.make_config(
            name, [("INPUT0", datatype, [4])], [("OUTPUT0", datatype, [4])], max_batch_size=8
        )
        models.write_model(repo, name, models.identity_model(datatype, ["batch", 4]), config)
    server = ServerProcess([repo]).start()
    try:
        with running_gateway(server.url) as gateway:
            yield gateway
    finally:
        assert server.stop() == 0, server.log


def _same_bits(got: np.ndarray, expected: np.ndarray) -> None:
    assert got.shape == expected.shape
    if expected.dtype == np.object_:
        assert [v.decode() if isinstance(v, bytes) else v for v in got.ravel()] == list(
            expected.ravel()
        )
        return
    assert got.dtype == expected.dtype, (got.dtype, expected.dtype)
    as_uint = np.dtype(f"u{expected.dtype.itemsize}")
    np.testing.assert_array_equal(got.view(as_uint), expected.view(as_uint))


@pytest.mark.parametrize("datatype", DATATYPES)
def test_binary_round_trip_is_exact(gw: GatewayProcess, datatype: str) -> None:
    client = httpclient.InferenceServerClient(gw.url)
    try:
        value = VALUES[datatype]
        tensor = httpclient.InferInput("INPUT0", list(value.shape), datatype)
        tensor.set_data_from_numpy(value, binary_data=True)
        output = httpclient.InferRequestedOutput("OUTPUT0", binary_data=True)
        result = client.infer(_model(datatype), [tensor], outputs=[output])
        _same_bits(result.as_numpy("OUTPUT0"), value)
    finally:
        client.close()


@pytest.mark.parametrize("datatype", [d for d in DATATYPES if d != "BF16"])
def test_tritonclient_json_mode(gw: GatewayProcess, datatype: str) -> None:
    """tritonclient sends JSON numbers (FP16 too); the values come back unchanged."""
    client = httpclient.InferenceServerClient(gw.url)
    try:
        value = VALUES[datatype]
        tensor = httpclient.InferInput("INPUT0", list(value.shape), datatype)
        tensor.set_data_from_numpy(value, binary_data=False)
        output = httpclient.InferRequestedOutput("OUTPUT0", binary_data=False)
        result = client.infer(_model(datatype), [tensor], outputs=[output])
        _same_bits(result.as_numpy("OUTPUT0"), value)
    finally:
        client.close()


def _json_value(datatype: str) -> list[object]:
    value = VALUES[datatype]
    if datatype == "BYTES":
        return value.tolist()
    if datatype == "BF16":
        return value.astype(np.float32).tolist()
    return value.tolist()


@pytest.mark.parametrize("datatype", DATATYPES)
def test_raw_json_round_trip(gw: GatewayProcess, datatype: str) -> None:
    """Nested JSON data in, flat JSON data out; BF16 as numbers both ways."""
    data = _json_value(datatype)
    body = {"inputs": [{"name": "INPUT0", "shape": [2, 4], "datatype": datatype, "data": data}]}
    reply = http_request(gw.url, "POST", f"/v2/models/{_model(datatype)}/infer", body)
    assert reply.status == 200, reply
    (out,) = reply.json()["outputs"]
    assert (out["datatype"], out["shape"]) == (datatype, [2, 4])
    expected = VALUES[datatype].ravel()
    if datatype == "BYTES":
        assert out["data"] == list(expected)
    else:
        dtype = np.float32 if datatype == "BF16" else expected.dtype
        got = np.array(out["data"], dtype=dtype)
        _same_bits(got, expected.astype(np.float32) if datatype == "BF16" else expected)


def test_non_finite_floats_become_null(gw: GatewayProcess) -> None:
    value = np.array([[np.nan, np.inf, -np.inf, 1.0]] * 2, np.float32)
    head = json.dumps(
        {
            "inputs": [
                {
                    "name": "INPUT0",
                    "shape": [2, 4],
                    "datatype": "FP32",
                    "parameters": {"binary_data_size": 32},
                }
            ],
            "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": False}}],
        }
    ).encode()
    reply = http_request(
        gw.url,
        "POST",
        "/v2/models/identity_fp32/infer",
        head + value.tobytes(),
        {"Inference-Header-Content-Length": str(len(head))},
    )
    assert reply.json()["outputs"][0]["data"] == [None, None, None, 1.0] * 2
