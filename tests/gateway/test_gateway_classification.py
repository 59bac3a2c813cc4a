"""The v2 ``classification`` extension over REST: JSON and binary outputs, ``0`` classes
(Triton's REST frontend then returns the plain tensor) and refused values."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
import tritonclient.http as httpclient
from conftest import running_gateway
from gateway_process import GatewayProcess, http_request
from server_process import ServerProcess
from v1_support import build_repository

DATA = [[0.1, 0.7, 0.05, 0.15], [0.4, 0.1, 0.2, 0.3]]


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    repo = build_repository(tmp_path_factory.mktemp("classification_http_repo"))
    args = ["--model-control-mode", "explicit", "--load-model", "*"]
    with ServerProcess([repo], args) as service, running_gateway(service.url) as gw:
        yield gw


def _body(classification: object) -> dict[str, object]:
    return {
        "inputs": [{"name": "INPUT", "datatype": "FP32", "shape": [2, 4], "data": DATA}],
        "outputs": [{"name": "PROB", "parameters": {"classification": classification}}],
    }


def test_json_classification(gateway: GatewayProcess) -> None:
    reply = http_request(gateway.url, "POST", "/v2/models/classifier/infer", _body(2))
    assert reply.status == 200, reply
    (out,) = reply.json()["outputs"]
    assert out["datatype"] == "BYTES" and out["shape"] == [2, 2]
    assert out["data"] == [
        "0.700000:1:one",
        "0.150000:3:three",
        "0.400000:0:zero",
        "0.300000:3:three",
    ]


def test_zero_classes_is_the_plain_tensor(gateway: GatewayProcess) -> None:
    reply = http_request(gateway.url, "POST", "/v2/models/classifier/infer", _body(0))
    assert reply.status == 200, reply
    (out,) = reply.json()["outputs"]
    assert out["datatype"] == "FP32" and out["shape"] == [2, 4]


def test_refused_classification_values(gateway: GatewayProcess) -> None:
    for value in (-1, "2", 1.5):
        reply = http_request(gateway.url, "POST", "/v2/models/classifier/infer", _body(value))
        assert reply.status == 400, reply
        assert reply.error.startswith("Unable to set 'classification'"), reply


def test_tritonclient_binary_classification(gateway: GatewayProcess) -> None:
    with httpclient.InferenceServerClient(gateway.url) as client:
        assert "classification" in client.get_server_metadata()["extensions"]
        inp = httpclient.InferInput("INPUT", [2, 4], "FP32")
        inp.set_data_from_numpy(np.array(DATA, dtype=np.float32))
        out = httpclient.InferRequestedOutput("PROB", binary_data=True, class_count=1)
        result = client.infer("classifier", [inp], outputs=[out])
        assert result.as_numpy("PROB").tolist() == [[b"0.700000:1:one"], [b"0.400000:0:zero"]]
