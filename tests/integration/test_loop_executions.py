"""A small ONNX model runs on the engine loop's own thread once its executions are known
to be short (decision 067); a slow one stays on its instance threads. Seen from outside:
the verbose log says when a model moves, and its statistics stay exact."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import tritonclient.grpc as grpcclient
from integration_support import add_sub_inputs, infer_input, running_server
from operations_support import slow_inputs, write_add_sub, write_slow

#: Requests enough for the gate to measure a model on its threads (inline.QUALIFY_RUNS)
#: a few times over, even if one window on this busy machine waited for the CPU.
REQUESTS = 100
ON_LOOP = "now run on the event loop's thread"


def _statistics(client: grpcclient.InferenceServerClient, model: str) -> dict[str, Any]:
    stats: dict[str, Any] = client.get_inference_statistics(model, as_json=True)["model_stats"][0]
    return stats


def test_a_small_model_moves_to_the_loop_and_a_slow_one_stays_on_its_threads(
    tmp_path: Path,
) -> None:
    repo = tmp_path / "repo"
    write_add_sub(repo, "add_sub")
    write_slow(repo, "slow")
    with (
        running_server([repo], extra_args=["--log-verbose", "1"]) as server,
        grpcclient.InferenceServerClient(server.url) as client,
    ):
        a = np.arange(16, dtype=np.float32).reshape(1, 16)
        b = np.ones((1, 16), dtype=np.float32)
        for _ in range(REQUESTS):
            result = client.infer("add_sub", add_sub_inputs(a, b))
            assert np.array_equal(result.as_numpy("OUTPUT0"), a + b)
            assert np.array_equal(result.as_numpy("OUTPUT1"), a - b)
        server.wait_for_log("model 'add_sub': executions of about", timeout=30)
        assert ON_LOOP in server.log
        for _ in range(REQUESTS // 2):
            rows = slow_inputs(64)  # ~16 M multiply-adds: milliseconds
            inputs = [
                infer_input("INPUT0", rows["INPUT0"], "FP32"),
                infer_input("REPEATS", rows["REPEATS"], "INT64"),
            ]
            client.infer("slow", inputs)
        stats = _statistics(client, "add_sub")
        slow_stats = _statistics(client, "slow")
    assert "model 'slow': executions" not in server.log
    # Every request counted once, whichever thread ran it.
    assert int(stats["inference_count"]) == int(stats["execution_count"]) == REQUESTS
    timing = stats["inference_stats"]
    for key in ("success", "queue", "compute_input", "compute_infer", "compute_output"):
        assert int(timing[key]["count"]) == REQUESTS, key
    assert int(timing["fail"].get("count", 0)) == 0
    (batch,) = stats["batch_stats"]
    assert int(batch["batch_size"]) == 1
    assert int(batch["compute_infer"]["count"]) == REQUESTS
    assert int(slow_stats["execution_count"]) == REQUESTS // 2
