"""generate_stream with a decoupled model: each response is an event, sent as it is made.

The model is a small Python-backend model written at test time (COUNT responses, one every
DELAY_MS, then the final flag). A service without the Python backend cannot load it: the
tests then skip, and the ONNX-model generate tests in test_gateway_endpoints.py remain.
"""

from __future__ import annotations

import http.client
import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import running_gateway
from gateway_process import GatewayProcess, http_request
from server_process import ServerProcess

CONFIG = """
name: "counter"
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [
  { name: "COUNT" data_type: TYPE_INT32 dims: [ 1 ] },
  { name: "DELAY_MS" data_type: TYPE_INT32 dims: [ 1 ] }
]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""

MODEL = """
import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            count = int(pb_utils.get_input_tensor_by_name(request, "COUNT").as_numpy()[0])
            delay = int(pb_utils.get_input_tensor_by_name(request, "DELAY_MS").as_numpy()[0])
            sender = request.get_response_sender()
            threading.Thread(target=self.stream, args=(sender, count, delay)).start()
        return None

    def stream(self, sender, count, delay):
        for index in range(count):
            time.sleep(delay / 1000.0)
            if sender.is_cancelled():
                return
            out = pb_utils.Tensor("OUT", np.array([index], dtype=np.int32))
            sender.send(pb_utils.InferenceResponse(output_tensors=[out]))
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
"""


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    repo: Path = tmp_path_factory.mktemp("decoupled_repo")
    (repo / "counter" / "1").mkdir(parents=True)
    (repo / "counter" / "config.pbtxt").write_text(CONFIG)
    (repo / "counter" / "1" / "model.py").write_text(MODEL)
    server = ServerProcess([repo]).start()
    try:
        with running_gateway(server.url) as gateway:
            if http_request(gateway.url, "GET", "/v2/models/counter/ready").status != 200:
                pytest.skip("this service cannot serve the decoupled Python model")
            yield gateway
    finally:
        assert server.stop() == 0, server.log


def test_events_arrive_as_the_model_sends_them(gw: GatewayProcess) -> None:
    host, port = gw.url.split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        start = time.monotonic()
        conn.request(
            "POST", "/v2/models/counter/generate_stream", json.dumps({"COUNT": 4, "DELAY_MS": 150})
        )
        response = conn.getresponse()
        assert response.status == 200
        assert response.getheader("content-type", "").startswith("text/event-stream")
        arrivals: list[tuple[float, dict[str, object]]] = []
        buffer = b""
        while chunk := response.read1(65536):
            buffer += chunk
            while b"\n\n" in buffer:
                event, buffer = buffer.split(b"\n\n", 1)
                assert event.startswith(b"data: ")
                arrivals.append((time.monotonic() - start, json.loads(event[6:])))
    finally:
        conn.close()
    assert [doc["OUT"] for _, doc in arrivals] == [0, 1, 2, 3]
    assert all(set(doc) == {"model_name", "model_version", "OUT"} for _, doc in arrivals)
    # Streamed, not buffered: the first event came well before the last one was made.
    assert arrivals[-1][0] - arrivals[0][0] > 0.3


def test_generate_wants_exactly_one_response(gw: GatewayProcess) -> None:
    reply = http_request(gw.url, "POST", "/v2/models/counter/generate", {"COUNT": 1, "DELAY_MS": 0})
    assert reply.status == 200
    assert reply.json() == {"model_name": "counter", "model_version": "1", "OUT": 0}
    # As Triton: the status comes from the first response (fine), the body says why not.
    reply = http_request(gw.url, "POST", "/v2/models/counter/generate", {"COUNT": 3, "DELAY_MS": 0})
    assert reply.status == 200
    assert "exactly 1 response" in reply.error


def test_a_client_that_leaves_does_not_stop_the_gateway(gw: GatewayProcess) -> None:
    host, port = gw.url.split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    conn.request(
        "POST", "/v2/models/counter/generate_stream", json.dumps({"COUNT": 50, "DELAY_MS": 20})
    )
    response = conn.getresponse()
    assert response.read1(65536).startswith(b"data: ")
    conn.close()  # mid-stream
    reply = http_request(gw.url, "POST", "/v2/models/counter/generate", {"COUNT": 1, "DELAY_MS": 0})
    assert reply.status == 200
