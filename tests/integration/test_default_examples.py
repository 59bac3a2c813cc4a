"""The embedded repository's Python, decoupled and ensemble examples, through tritonclient."""

from __future__ import annotations

import queue

import numpy as np
import tritonclient.grpc as grpcclient
from server_process import ServerProcess

IRIS_MM = np.array([[51, 35, 14, 2], [70, 32, 47, 14], [63, 33, 60, 25]], dtype=np.float32)


def test_ensemble_with_python_preprocessing_step(default_server: ServerProcess) -> None:
    with grpcclient.InferenceServerClient(default_server.url) as client:
        tensor = grpcclient.InferInput("MEASUREMENTS_MM", [3, 4], "FP32")
        tensor.set_data_from_numpy(IRIS_MM)
        result = client.infer("iris_pipeline", [tensor])
        np.testing.assert_array_equal(result.as_numpy("LABEL"), [[0], [1], [2]])
        assert result.as_numpy("PROBABILITIES").shape == (3, 3)
        pre = client.infer("iris_preprocess", [tensor]).as_numpy("FEATURES_CM")
        np.testing.assert_allclose(pre, IRIS_MM / 10, rtol=1e-6)


def test_token_stream_sends_one_response_per_token(default_server: ServerProcess) -> None:
    responses: queue.Queue[tuple[object, object]] = queue.Queue()
    tokens: list[bytes] = []
    with grpcclient.InferenceServerClient(default_server.url) as client:
        client.start_stream(callback=lambda result, error: responses.put((result, error)))
        text = grpcclient.InferInput("TEXT", [1], "BYTES")
        text.set_data_from_numpy(np.array([b"one two three four"], dtype=np.object_))
        client.async_stream_infer(
            "token_stream", [text], request_id="t", enable_empty_final_response=True
        )
        while True:
            result, error = responses.get(timeout=30)
            assert error is None, error
            response = result.get_response()  # type: ignore[attr-defined]
            assert response.id == "t"
            if response.outputs:
                tokens.append(result.as_numpy("TOKEN")[0])  # type: ignore[attr-defined]
            if response.parameters["triton_final_response"].bool_param:
                break
        client.stop_stream()
    assert tokens == [b"one", b"two", b"three", b"four"]
