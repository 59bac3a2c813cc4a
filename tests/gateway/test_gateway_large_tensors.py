"""Large tensors through the REST gateway, whose local-socket calls keep the raw bytes out
of protobuf (gateway/raw_messages.py): binary inputs sent from the HTTP body as they are,
a large answer's outputs read in place. Clients see none of it: tritonclient.http gets
every byte back, binary and JSON, around the split size and at a few MiB, and Triton's
raw binary request (no JSON header) carries a large body too.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from conftest import running_gateway
from gateway_process import GatewayProcess, http_request
from models import identity_model, make_config, write_model
from server_process import ServerProcess

SPLIT = 256 << 10  # gateway/raw_messages.py SPLIT_MIN_BYTES (this environment cannot import it)


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    repo: Path = tmp_path_factory.mktemp("large_rest")
    io = ([("INPUT0", "UINT8", [-1])], [("OUTPUT0", "UINT8", [-1])])
    write_model(repo, "ident", identity_model("UINT8", ["n"]), make_config("ident", *io))
    fp32 = ([("INPUT0", "FP32", [-1])], [("OUTPUT0", "FP32", [-1])])
    write_model(repo, "ident32", identity_model("FP32", ["n"]), make_config("ident32", *fp32))
    with ServerProcess([repo]) as server, running_gateway(server.url) as running:
        yield running


def _data(size: int) -> np.ndarray:
    return np.random.default_rng(size).integers(0, 255, size, dtype=np.uint8)


@pytest.mark.parametrize("size", [SPLIT - 100, SPLIT + 3, 3 << 20])
def test_binary_round_trips_keep_every_byte(gateway: GatewayProcess, size: int) -> None:
    data = _data(size)
    with httpclient.InferenceServerClient(gateway.url) as client:
        tensor = httpclient.InferInput("INPUT0", [size], "UINT8")
        tensor.set_data_from_numpy(data, binary_data=True)
        wanted = [httpclient.InferRequestedOutput("OUTPUT0", binary_data=True)]
        result = client.infer("ident", [tensor], outputs=wanted, request_id="big")
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data)
        assert result.get_response()["id"] == "big"


def test_a_large_output_asked_as_json_is_written_as_json(gateway: GatewayProcess) -> None:
    data = np.arange(SPLIT // 4 * 2, dtype=np.float32)  # 512 KiB: a view of the answer
    with httpclient.InferenceServerClient(gateway.url) as client:
        tensor = httpclient.InferInput("INPUT0", [data.size], "FP32")
        tensor.set_data_from_numpy(data, binary_data=True)
        wanted = [httpclient.InferRequestedOutput("OUTPUT0", binary_data=False)]
        result = client.infer("ident32", [tensor], outputs=wanted)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data)


def test_a_large_raw_binary_request(gateway: GatewayProcess) -> None:
    """Triton's raw binary request: the whole body is the only input's data."""
    data = _data(2 << 20)
    reply = http_request(
        gateway.url,
        "POST",
        "/v2/models/ident/infer",
        body=data.tobytes(),
        headers={
            "Inference-Header-Content-Length": "0",
            "Content-Type": "application/octet-stream",
        },
    )
    assert reply.status == 200, reply.body[:300]
    length = int(reply.headers["inference-header-content-length"])
    assert reply.body[length:] == data.tobytes()
