"""One scripted mix of requests gives the same statistics in both process layouts.

With ``--frontends N`` the frontends decode and answer while the engine schedules and counts;
``--frontends 0`` does everything in one process. A client must not be able to tell them
apart by ModelStatistics or by the failure reasons on ``/metrics``: the mix sends plain,
batched, sequence, ensemble, decoupled, failing, refused and cancelled requests through both
and compares every count (times differ by nature and are left out). It is also the guard
rail for moving work between the processes (the engine issue).
"""

from __future__ import annotations

import asyncio
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as aioclient
from integration_support import add_sub_inputs, running_server
from models import write_model
from operations_support import metrics_port, scrape, write_add_sub
from sequence_models import accumulator_config, accumulator_model
from server_process import DEFAULT_REPOSITORY
from tritonclient.utils import InferenceServerException

MODELS = [
    "add_sub",
    "add_sub_batch",
    "add_sub_queued",
    "accumulator",
    "iris_pipeline",
    "iris_preprocess",
    "iris_classifier",
    "token_stream",
    "fails",
]
_FAILS = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        # Raised, not answered: Triton counts a model's error response as a success.
        raise pb_utils.TritonModelException("this model always fails")
"""


def _repository(root: Path) -> Path:
    repo = root / "repo"
    shutil.copytree(DEFAULT_REPOSITORY, repo)
    # Four requests make one batch: the preferred size, long before the delay.
    batched = "preferred_batch_size: [ 4 ] max_queue_delay_microseconds: 10000000"
    write_add_sub(repo, "add_sub_batch", f"dynamic_batching {{ {batched} }}")
    # One request waits for the delay: its caller's deadline comes first (CANCELED).
    queued = "preferred_batch_size: [ 8 ] max_queue_delay_microseconds: 20000000"
    write_add_sub(repo, "add_sub_queued", f"dynamic_batching {{ {queued} }}")
    write_model(repo, "accumulator", accumulator_model(), accumulator_config("accumulator"))
    (repo / "fails" / "1").mkdir(parents=True)
    (repo / "fails" / "1" / "model.py").write_text(_FAILS)
    (repo / "fails" / "config.pbtxt").write_text(
        'backend: "python"\nmax_batch_size: 0\n'
        'input [{ name: "X" data_type: TYPE_FP32 dims: [ 1 ] }]\n'
        'output [{ name: "Y" data_type: TYPE_FP32 dims: [ 1 ] }]\n'
    )
    return repo


def _add_sub_inputs(rows: int, width: int = 4) -> list[grpcclient.InferInput]:
    ones = np.ones((rows, width), np.float32)
    return add_sub_inputs(ones, ones)


async def _batched_four(url: str) -> None:
    async with aioclient.InferenceServerClient(url) as client:
        inputs = []
        for _ in range(4):
            pair = [aioclient.InferInput(n, [1, 4], "FP32") for n in ("INPUT0", "INPUT1")]
            for tensor in pair:
                tensor.set_data_from_numpy(np.ones((1, 4), np.float32))
            inputs.append(pair)
        await asyncio.gather(*(client.infer("add_sub_batch", pair) for pair in inputs))


def _mix(url: str) -> None:
    with grpcclient.InferenceServerClient(url) as client:
        for rows in (1, 3, 8):  # plain, three batch sizes
            client.infer("add_sub", _add_sub_inputs(rows))
        with pytest.raises(InferenceServerException):  # refused before scheduling
            client.infer("add_sub", _add_sub_inputs(9))
        asyncio.run(_batched_four(url))
        for step, (start, end) in enumerate([(True, False), (False, False), (False, True)]):
            tensor = grpcclient.InferInput("INPUT", [1, 1], "INT32")
            tensor.set_data_from_numpy(np.array([[step + 1]], np.int32))
            client.infer(
                "accumulator", [tensor], sequence_id=7, sequence_start=start, sequence_end=end
            )
        measurements = grpcclient.InferInput("MEASUREMENTS_MM", [2, 4], "FP32")
        measurements.set_data_from_numpy(np.array([[51, 35, 14, 2], [70, 32, 47, 14]], np.float32))
        client.infer("iris_pipeline", [measurements])
        with pytest.raises(InferenceServerException, match="this model always fails"):
            value = grpcclient.InferInput("X", [1], "FP32")
            value.set_data_from_numpy(np.ones(1, np.float32))
            client.infer("fails", [value])
        with pytest.raises(InferenceServerException):  # its deadline passes in the queue
            client.infer("add_sub_queued", _add_sub_inputs(1), client_timeout=0.3)
        _stream_tokens(client, "one two three")
        # The cancelled request is counted once the engine sees it: wait for that.
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and not _failures(client, "add_sub_queued"):
            time.sleep(0.1)


def _failures(client: grpcclient.InferenceServerClient, model: str) -> int:
    stats = client.get_inference_statistics(model, as_json=True)["model_stats"][0]
    return int(stats["inference_stats"].get("fail", {}).get("count", 0))


def _stream_tokens(client: grpcclient.InferenceServerClient, text: str) -> None:
    answers: list[Any] = []
    client.start_stream(callback=lambda result, error: answers.append((result, error)))
    try:
        tensor = grpcclient.InferInput("TEXT", [1], "BYTES")
        tensor.set_data_from_numpy(np.array([text.encode()], np.object_))
        client.async_stream_infer("token_stream", [tensor], enable_empty_final_response=True)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and len(answers) < len(text.split()) + 1:
            time.sleep(0.05)
    finally:
        client.stop_stream()
    assert all(error is None for _, error in answers), answers


def _counts(stats: dict[str, Any]) -> dict[str, Any]:
    """Every count of one model version's statistics, no durations."""
    inference = stats.get("inference_stats", {})
    out: dict[str, Any] = {
        key: int(stats.get(key, 0)) for key in ("inference_count", "execution_count")
    }
    for key, value in inference.items():
        out[f"inference_stats.{key}"] = int(value.get("count", 0))
    for batch in stats.get("batch_stats", []):
        out[f"batch_stats.{batch['batch_size']}"] = int(batch["compute_infer"].get("count", 0))
    for key, value in stats.get("response_stats", {}).items():
        for part, measure in value.items():
            out[f"response_stats.{key}.{part}"] = int(measure.get("count", 0))
    return out


def _observed(server: Any) -> tuple[dict[str, Any], dict[tuple[str, str], float]]:
    with grpcclient.InferenceServerClient(server.url) as client:
        counts = {
            model: _counts(client.get_inference_statistics(model, as_json=True)["model_stats"][0])
            for model in MODELS
        }
    reasons = {
        (model, metric.partition(":")[2]): value
        for (metric, model, _), value in scrape(metrics_port(server)).items()
        if metric.startswith("nv_inference_request_failure:") and value
    }
    return counts, reasons


def test_one_mix_gives_the_same_statistics_in_both_layouts(tmp_path: Path) -> None:
    repo = _repository(tmp_path)
    seen = {}
    for frontends in ("0", "2"):
        args = ["--frontends", frontends]
        with running_server([repo], args) as server:
            _mix(server.url)
            seen[frontends] = _observed(server)
    counts, reasons = seen["0"]
    assert counts == seen["2"][0]
    assert reasons == seen["2"][1]
    # The mix reached what it meant to: one batch of four, a failure of each kind.
    assert counts["add_sub_batch"]["batch_stats.4"] == 1
    assert counts["add_sub"]["inference_count"] == 1 + 3 + 8
    assert reasons == {("fails", "BACKEND"): 1.0, ("add_sub_queued", "CANCELED"): 1.0}
    assert counts["accumulator"]["inference_count"] == 3
    assert counts["iris_classifier"]["inference_count"] == 2
