"""Triton behaviours its own qa relies on: the gRPC response-delay hook, and the refusal
an ensemble request gets while the server stops.

- ``TRITONSERVER_SERVER_DELAY_GRPC_RESPONSE_SEC=N`` (qa/L0_client_timeout): every
  non-inference gRPC answer is written N seconds late, so a client timeout below N ends
  in "Deadline Exceeded"; inference is not delayed. In both layouts (the frontends are
  the processes that read it).
- After SIGTERM a new request to an ensemble is refused with the text of Triton's
  composing scheduler, prefixed by the ensemble (qa/L0_lifecycle test_shutdown_ensemble).
"""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from gated_model import write_gated_model
from server_process import DEFAULT_REPOSITORY, ServerProcess
from tritonclient.utils import InferenceServerException

STOPPING = "Server is stopping, scheduler for model has stopped accepting new inference requests"


@pytest.mark.parametrize("frontends", ["0", "2"])
def test_delay_grpc_response_hook(frontends: str) -> None:
    env = {"TRITONSERVER_SERVER_DELAY_GRPC_RESPONSE_SEC": "2"}
    args = ["--frontends", frontends]
    with ServerProcess(extra_args=args, env=env) as server:
        client = grpcclient.InferenceServerClient(server.url)
        for call in (
            lambda t: client.is_server_live(client_timeout=t),
            lambda t: client.get_model_config("add_sub", client_timeout=t),
            lambda t: client.get_inference_statistics("add_sub", client_timeout=t),
        ):
            with pytest.raises(InferenceServerException, match="Deadline Exceeded"):
                call(0.3)
        time.sleep(2.5)  # the answers above are still being held back
        start = time.monotonic()
        assert client.is_server_live(client_timeout=10)
        assert time.monotonic() - start >= 1.9
        inputs = [grpcclient.InferInput(n, [1, 4], "FP32") for n in ("INPUT0", "INPUT1")]
        for tensor in inputs:
            tensor.set_data_from_numpy(np.ones((1, 4), np.float32))
        start = time.monotonic()
        result = client.infer("add_sub", inputs, client_timeout=10)
        assert time.monotonic() - start < 1.5  # inference is never delayed
        np.testing.assert_allclose(result.as_numpy("OUTPUT0"), np.full((1, 4), 2.0))
        client.close()


def test_delay_hook_off_without_the_variable() -> None:
    with ServerProcess() as server:
        client = grpcclient.InferenceServerClient(server.url)
        assert client.is_server_live(client_timeout=1)
        client.close()


def test_ensemble_request_refused_while_stopping_names_the_ensemble(tmp_path: Path) -> None:
    gated = write_gated_model(tmp_path, "gated", batching="")
    server = ServerProcess(
        [DEFAULT_REPOSITORY, tmp_path], extra_args=["--exit-timeout-secs", "30"]
    ).start(timeout=90)
    try:
        client = grpcclient.InferenceServerClient(server.url)
        held = grpcclient.InferInput("INPUT0", [1, 4], "FP32")
        held.set_data_from_numpy(np.ones((1, 4), np.float32))
        outcome: list[object] = []
        busy = threading.Thread(
            target=lambda: outcome.append(client.infer("gated", [held], client_timeout=60))
        )
        busy.start()
        gated.wait_started()
        server.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        measurements = grpcclient.InferInput("MEASUREMENTS_MM", [1, 4], "FP32")
        measurements.set_data_from_numpy(np.full((1, 4), 50.0, np.float32))
        with pytest.raises(InferenceServerException) as refused:
            client.infer("iris_pipeline", [measurements], client_timeout=10)
        assert refused.value.status() == "StatusCode.UNAVAILABLE"
        assert refused.value.message() == (
            f"in ensemble 'iris_pipeline', [request id: <id_unknown>] {STOPPING}"
        )
        with pytest.raises(InferenceServerException) as plain:
            client.infer("add_sub", _add_sub(), request_id="late", client_timeout=10)
        assert plain.value.message() == f"[request id: late] {STOPPING}"
        gated.open_gate()
        busy.join(30)
        assert len(outcome) == 1  # the request in flight was answered
        assert server.wait(30) == 0
    finally:
        server.kill()


def _add_sub() -> list[grpcclient.InferInput]:
    inputs = [grpcclient.InferInput(n, [1, 4], "FP32") for n in ("INPUT0", "INPUT1")]
    for tensor in inputs:
        tensor.set_data_from_numpy(np.ones((1, 4), np.float32))
    return inputs
