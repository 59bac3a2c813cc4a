"""Large tensors through the REST gateway, whose local-socket calls keep the raw bytes out
of protobuf (gateway/raw_messages.py): binary inputs sent from the HTTP body as they are,
a large answer's outputs read in place. Clients see none of it: tritonclient.http gets
every byte back, binary and JSON, around the split size and at a few MiB, and Triton's
raw binary request (no JSON header) carries a large body too.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

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
    (repo / "echo" / "1").mkdir(parents=True)  # the built-in identity: outputs are views
    (repo / "echo" / "config.pbtxt").write_text(
        'name: "echo"\nbackend: "identity"\nmax_batch_size: 0\n'
        'input [ { name: "INPUT0" data_type: TYPE_UINT8 dims: [ -1 ] } ]\n'
        'output [ { name: "OUTPUT0" data_type: TYPE_UINT8 dims: [ -1 ] } ]\n',
        encoding="utf-8",
    )
    with ServerProcess([repo]) as server, running_gateway(server.url) as running:
        yield running


def _data(size: int) -> np.ndarray:
    return np.random.default_rng(size).integers(0, 255, size, dtype=np.uint8)


@pytest.mark.parametrize("size", [SPLIT - 100, SPLIT + 3, 3 << 20])
@pytest.mark.parametrize("model", ["ident", "echo"])
def test_binary_round_trips_keep_every_byte(gateway: GatewayProcess, model: str, size: int) -> None:
    """``echo`` (the built-in identity): its output a view of the request's input block,
    echoed by the engine and read from the frontend's own bytes (decision 076)."""
    data = _data(size)
    with httpclient.InferenceServerClient(gateway.url) as client:
        tensor = httpclient.InferInput("INPUT0", [size], "UINT8")
        tensor.set_data_from_numpy(data, binary_data=True)
        wanted = [httpclient.InferRequestedOutput("OUTPUT0", binary_data=True)]
        result = client.infer(model, [tensor], outputs=wanted, request_id="big")
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


def _raw_infer(data: bytes) -> bytes:
    """Triton's raw binary request for ``ident`` (the body is the input's data)."""
    head = (
        "POST /v2/models/ident/infer HTTP/1.1\r\nHost: x\r\n"
        "Inference-Header-Content-Length: 0\r\nContent-Type: application/octet-stream\r\n"
        f"Content-Length: {len(data)}\r\n\r\n"
    )
    return head.encode() + data


_READY = b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\n\r\n"


def _read_reply(stream: BinaryIO) -> tuple[int, bytes]:
    """One HTTP/1.1 answer of a known length off a kept-alive connection."""
    status = int(stream.readline().split()[1])
    length = 0
    while (line := stream.readline()) not in (b"\r\n", b""):
        name, _, value = line.decode("latin-1").partition(":")
        if name.strip().lower() == "content-length":
            length = int(value)
    return status, stream.read(length)


def _connect(gateway: GatewayProcess) -> socket.socket:
    host, port = gateway.url.rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=60)


def _output_of(body: bytes, size: int) -> bytes:
    return body[len(body) - size :]


def test_a_large_body_then_a_pipelined_request(gateway: GatewayProcess) -> None:
    """The rest of a large body is read into its own buffer and the parser restarts after
    it: a request sent right behind it, in the same write, is answered next."""
    data = _data(SPLIT * 3 + 5).tobytes()
    with _connect(gateway) as sock, sock.makefile("rb") as stream:
        sock.sendall(_raw_infer(data) + _READY)
        status, body = _read_reply(stream)
        assert status == 200, body[:300]
        assert _output_of(body, len(data)) == data
        assert _read_reply(stream) == (200, b"")


def test_a_large_body_in_pieces_on_a_kept_connection(gateway: GatewayProcess) -> None:
    """A body that comes in several writes (the head with its first bytes, then the rest
    in pieces), twice on one connection, then a small request."""
    data = _data(SPLIT * 2).tobytes()
    message = _raw_infer(data)
    with _connect(gateway) as sock, sock.makefile("rb") as stream:
        for _ in range(2):
            pieces = [message[:1000], message[1000:200_000], message[200_000:]]
            for piece in pieces:
                sock.sendall(piece)
                time.sleep(0.05)
            status, body = _read_reply(stream)
            assert status == 200, body[:300]
            assert _output_of(body, len(data)) == data
        sock.sendall(_READY)
        assert _read_reply(stream) == (200, b"")


def test_a_client_gone_inside_a_large_body_loses_nothing_else(gateway: GatewayProcess) -> None:
    """A client that declares a large body and leaves after part of it: its connection
    ends, and the next client is served."""
    data = _data(SPLIT * 2).tobytes()
    with _connect(gateway) as sock:
        sock.sendall(_raw_infer(data)[: SPLIT // 2])
    status = http_request(gateway.url, "GET", "/v2/health/ready").status
    assert status == 200
    test_binary_round_trips_keep_every_byte(gateway, "ident", SPLIT + 3)
