"""Triton behaviours its own qa relies on: the gRPC response-delay hook.

- ``TRITONSERVER_SERVER_DELAY_GRPC_RESPONSE_SEC=N`` (qa/L0_client_timeout): every
  non-inference gRPC answer is written N seconds late, so a client timeout below N ends
  in "Deadline Exceeded"; inference is not delayed. In both layouts (the frontends are
  the processes that read it).
"""

from __future__ import annotations

import time

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from server_process import ServerProcess
from tritonclient.utils import InferenceServerException


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
