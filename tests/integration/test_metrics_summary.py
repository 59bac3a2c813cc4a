"""Latency summaries and the first-response histogram (``--metrics-config``) end to end.

After a known workload, each summary's ``_count`` / ``_sum`` must equal the ModelStatistics
count / ns of the same duration (both come from the same ``ModelStats.record_*`` calls),
``_sum`` must round down to the counter, and the quantiles must lie within what was
observed. Off by default; a wrong setting stops the start with exit code 2.
"""

from __future__ import annotations

import math
import queue
import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from integration_support import add_sub_inputs, expect_error, running_server
from operations_support import http_get, metrics_port, write_add_sub
from server_process import REPO_ROOT, ServerProcess

CACHE = "response_cache { enable: true }"
SQUARE = """name: "square"
backend: "square"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""
PARTS = {  # summary family -> ModelStatistics duration (and the counter beside it)
    "request": "success",
    "queue": "queue",
    "compute_input": "compute_input",
    "compute_infer": "compute_infer",
    "compute_output": "compute_output",
}
QUANTILES = ("0.5", "0.9", "0.95", "0.99", "0.999")
STREAM_DELAY_MS, STREAM_COUNT = 150, 2
_SAMPLE = re.compile(r"^([a-zA-Z_:][\w:]*)(?:\{([^}]*)\})? (\S+)$")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape_all(port: int) -> tuple[str, Samples]:
    """Every sample with all its labels (the shared helper knows model/version only)."""
    status, _, body = http_get(f"http://127.0.0.1:{port}/metrics")
    assert status == 200, body
    text = body.decode()
    samples: Samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            match = _SAMPLE.match(line)
            assert match, f"unexpected sample line {line!r}"
            name, labels, value = match.groups()
            samples[(name, frozenset(_LABEL.findall(labels or "")))] = float(value)
    return text, samples


def sample(samples: Samples, name: str, model: str, **extra: str) -> float:
    return samples[(name, frozenset({("model", model), ("version", "1"), *extra.items()}))]


def _stream(url: str, count: int, delay_ms: int) -> None:
    """One streamed request to 'stream'; waits for its final response."""
    results: queue.Queue[tuple[object, object]] = queue.Queue()
    inputs = []
    for name, value in (("COUNT", count), ("DELAY_MS", delay_ms)):
        tensor = grpcclient.InferInput(name, [1], "INT32")
        tensor.set_data_from_numpy(np.array([value], dtype=np.int32))
        inputs.append(tensor)
    with grpcclient.InferenceServerClient(url) as client:
        client.start_stream(callback=lambda result, error: results.put((result, error)))
        client.async_stream_infer("stream", inputs, enable_empty_final_response=True)
        while True:
            result, error = results.get(timeout=30)
            assert error is None, error
            response = result.get_response()  # type: ignore[attr-defined]
            if response.parameters["triton_final_response"].bool_param:
                break
        client.stop_stream()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("metrics_summary")
    for name in ("plain", "single"):
        write_add_sub(repo, name)
    write_add_sub(repo, "cached", extra=CACHE)
    shutil.copytree(REPO_ROOT / "tests" / "python_models" / "stream", repo / "stream")
    args = [
        "--cache-config=local,size=1048576",
        "--metrics-config=summary_latencies=true",
        "--metrics-config",
        "histogram_latencies=true",
    ]
    with running_server([repo], extra_args=args) as proc:
        yield proc


@pytest.fixture(scope="module")
def workload(server: ServerProcess) -> dict[str, float]:
    """Runs the workload once; returns the slowest client-side call to 'plain' in µs."""
    a = np.arange(6, dtype=np.float32).reshape(3, 2)
    slowest = 0.0
    with grpcclient.InferenceServerClient(server.url) as client:
        for i in range(20):
            start = time.perf_counter()
            client.infer("plain", add_sub_inputs(a[: 1 + i % 3], a[: 1 + i % 3]))
            slowest = max(slowest, (time.perf_counter() - start) * 1e6)
        ints = a.astype(np.int32)  # refused by validation: a failure, not an observation
        expect_error(
            lambda: client.infer("plain", add_sub_inputs(ints, ints, "INT32")), "INVALID_ARGUMENT"
        )
        client.infer("single", add_sub_inputs(a, a))
        for _ in range(3):  # one miss, then two hits
            client.infer("cached", add_sub_inputs(a, a))
    for _ in range(2):
        _stream(server.url, STREAM_COUNT, STREAM_DELAY_MS)
    return {"plain_slowest_us": slowest}


def _statistics(server: ServerProcess) -> dict[str, dict[str, dict[str, str]]]:
    with grpcclient.InferenceServerClient(server.url) as client:
        stats = client.get_inference_statistics(as_json=True)["model_stats"]
    return {s["name"]: s["inference_stats"] for s in stats}


def test_summaries_agree_with_model_statistics(
    server: ServerProcess, workload: dict[str, float]
) -> None:
    text, samples = scrape_all(metrics_port(server))
    stats = _statistics(server)
    assert set(stats) == {"plain", "single", "cached", "stream"}
    for model, infer in stats.items():
        for part, stat in PARTS.items():
            family = f"nv_inference_{part}_summary_us"
            count = sample(samples, f"{family}_count", model)
            total = sample(samples, f"{family}_sum", model)
            ns = int(infer[stat].get("ns", 0))
            assert count == int(infer[stat].get("count", 0)), (model, part)
            assert round(total * 1000) == ns, (model, part)  # the exact sum, in µs
            counter = sample(samples, f"nv_inference_{part}_duration_us", model)
            assert math.floor(total) == counter, (model, part)
            values = [sample(samples, family, model, quantile=q) for q in QUANTILES]
            if count == 0:
                assert all(math.isnan(v) for v in values), (model, part)
                continue
            # Observed values lie in [0, sum]; the 0.999 quantile of < 1000 values is the
            # largest, which is at least the mean; quantiles never decrease.
            assert values == sorted(values), (model, part, values)
            assert values[0] >= 0 and values[-1] <= total + 1e-9, (model, part, values)
            assert values[-1] >= total / count - 1e-9, (model, part, values)
            if count == 1:
                assert values == [total] * len(QUANTILES), (model, part, values)
    # The workload, so the comparisons above are not vacuous.
    assert sample(samples, "nv_inference_request_summary_us_count", "plain") == 20
    assert sample(samples, "nv_inference_request_summary_us_count", "single") == 1
    assert sample(samples, "nv_inference_request_summary_us_count", "cached") == 3  # hits too
    assert sample(samples, "nv_inference_queue_summary_us_count", "cached") == 3
    assert sample(samples, "nv_inference_compute_infer_summary_us_count", "cached") == 1  # miss
    assert sample(samples, "nv_inference_request_summary_us_count", "stream") == 2
    assert sample(samples, "nv_inference_compute_infer_summary_us_count", "plain") == 20
    slowest_plain = sample(samples, "nv_inference_request_summary_us", "plain", quantile="0.999")
    assert 0 < slowest_plain <= workload["plain_slowest_us"]
    # A streamed request lasts at least COUNT * DELAY.
    fastest_stream = sample(samples, "nv_inference_request_summary_us", "stream", quantile="0.5")
    assert fastest_stream >= STREAM_COUNT * STREAM_DELAY_MS * 1000
    assert "# TYPE nv_inference_request_summary_us summary" in text


def test_first_response_histogram_for_the_decoupled_model(
    server: ServerProcess, workload: dict[str, float]
) -> None:
    text, samples = scrape_all(metrics_port(server))
    family = "nv_inference_first_response_histogram_ms"
    assert "# TYPE nv_inference_first_response_histogram_ms histogram" in text
    assert sample(samples, f"{family}_count", "stream") == 2
    total_ms = sample(samples, f"{family}_sum", "stream")
    assert 2 * STREAM_DELAY_MS <= total_ms < 2 * 500
    buckets = {le: sample(samples, f"{family}_bucket", "stream", le=le) for le in
               ("100", "500", "2000", "5000", "+Inf")}  # fmt: skip
    assert buckets == {"100": 0, "500": 2, "2000": 2, "5000": 2, "+Inf": 2}
    # Only decoupled models have it (as in Triton).
    assert not [key for key in samples if key[0].startswith(family) and
                ("model", "stream") not in key[1]]  # fmt: skip


def test_off_by_default(tmp_path: Path) -> None:
    write_add_sub(tmp_path, "plain")
    (tmp_path / "square" / "1").mkdir(parents=True)
    (tmp_path / "square" / "config.pbtxt").write_text(SQUARE)
    with running_server([tmp_path]) as server:
        with grpcclient.InferenceServerClient(server.url) as client:
            a = np.ones((1, 2), dtype=np.float32)
            client.infer("plain", add_sub_inputs(a, a))
        text, samples = scrape_all(metrics_port(server))
    assert sample(samples, "nv_inference_request_success", "plain") == 1
    assert "_summary_us" not in text
    assert "nv_inference_first_response_histogram_ms" not in text
    assert 'quantile="' not in text


@pytest.mark.parametrize(
    ("spec", "named"),
    [
        ("summary_quantiles=0.5:0.05,1.5:0.01", "summary_quantiles"),
        ("summary_latencies=maybe", "summary_latencies"),
        ("summary_latency=true", "summary_latency"),
    ],
)
def test_a_bad_metrics_config_stops_the_start(tmp_path: Path, spec: str, named: str) -> None:
    write_add_sub(tmp_path, "plain")
    server = ServerProcess([tmp_path], extra_args=["--metrics-config", spec])
    with pytest.raises(RuntimeError, match="server exited with 2"):
        server.start()
    server.kill()
    assert f"--metrics-config {named}" in server.log or f"'{named}'" in server.log, server.log
