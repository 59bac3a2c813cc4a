"""The statistics extension and the response cache, counted exactly, over gRPC.

One server serves a temporary repository where each test owns its model, so every count is
exact whatever ran before. The server runs with TRITONSERVER_DELAY_SCHEDULER=64 (only the
'batcher' model has a dynamic batcher: its first 64 requests are held until all arrived)
and with a 1 MiB response cache, which only the 'cached' model enables.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import models
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as aioclient
from integration_support import add_sub_inputs, expect_error, infer_input, running_server
from server_process import ServerProcess

ADD_SUB_IO = (
    [("INPUT0", "FP32", [-1]), ("INPUT1", "FP32", [-1])],
    [("OUTPUT0", "FP32", [-1]), ("OUTPUT1", "FP32", [-1])],
)
ADD_SUB_MODELS = ("batch8", "failing", "concurrent", "selection", "uncached")
CACHE_ENABLED = "response_cache { enable: true }"


def write_add_sub(repo: Path, name: str, extra: str = "") -> None:
    config = models.make_config(name, *ADD_SUB_IO, max_batch_size=8, extra=extra)
    models.write_model(repo, name, models.add_sub_model(), config)


@pytest.fixture(scope="module")
def stats_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("stats_repo")
    for name in ADD_SUB_MODELS:
        write_add_sub(repo, name)
    write_add_sub(repo, "cached", CACHE_ENABLED)
    models.write_model(
        repo,
        "batcher",
        models.identity_model("FP32", ["batch", 4]),
        models.make_config(
            "batcher",
            [("INPUT0", "FP32", [4])],
            [("OUTPUT0", "FP32", [4])],
            max_batch_size=64,
            extra="dynamic_batching { }",
        ),
    )
    with running_server(
        [repo],
        extra_args=["--cache-config", "local,size=1048576"],
        env={"TRITONSERVER_DELAY_SCHEDULER": "64"},
    ) as server:
        yield server


@pytest.fixture
def client(stats_server: ServerProcess) -> Iterator[grpcclient.InferenceServerClient]:
    with grpcclient.InferenceServerClient(stats_server.url) as c:
        yield c


def stats(client: grpcclient.InferenceServerClient, model: str) -> Any:
    """The one ModelStatistics message of ``model`` (version 1)."""
    response = client.get_inference_statistics(model)
    assert [(s.name, s.version) for s in response.model_stats] == [(model, "1")]
    return response.model_stats[0]


def pair(rows: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return (
        rng.standard_normal((rows, 3), dtype=np.float32),
        rng.standard_normal((rows, 3), dtype=np.float32),
    )


def check_add_sub(result: Any, a: np.ndarray, b: np.ndarray) -> None:
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)


def counts(duration: Any) -> int:
    return int(duration.count)


# --- statistics -------------------------------------------------------------------------------


def test_fresh_model_has_zero_counts(client: grpcclient.InferenceServerClient) -> None:
    s = stats(client, "selection")
    assert s.inference_count == 0 and s.execution_count == 0 and s.last_inference == 0
    inf = s.inference_stats
    for field in ("success", "fail", "queue", "compute_input", "compute_infer", "compute_output"):
        assert counts(getattr(inf, field)) == 0, field
    assert list(s.batch_stats) == []


def test_one_request_of_batch_8(client: grpcclient.InferenceServerClient) -> None:
    a, b = pair(8, 0)
    before_ms = time.time_ns() // 1_000_000
    check_add_sub(client.infer("batch8", add_sub_inputs(a, b)), a, b)
    after_ms = time.time_ns() // 1_000_000
    s = stats(client, "batch8")
    assert s.inference_count == 8
    assert s.execution_count == 1
    assert before_ms <= s.last_inference <= after_ms
    inf = s.inference_stats
    for field in ("success", "queue", "compute_input", "compute_infer", "compute_output"):
        assert counts(getattr(inf, field)) == 1, field
    assert inf.success.ns > 0 and inf.compute_infer.ns > 0
    assert inf.success.ns >= inf.compute_infer.ns
    assert counts(inf.fail) == 0
    assert counts(inf.cache_hit) == 0 and counts(inf.cache_miss) == 0
    assert [b.batch_size for b in s.batch_stats] == [8]
    batch = s.batch_stats[0]
    assert counts(batch.compute_input) == counts(batch.compute_infer) == 1
    assert counts(batch.compute_output) == 1
    assert sorted(s.response_stats) == ["0"]
    assert counts(s.response_stats["0"].success) == 1
    assert counts(s.response_stats["0"].fail) == 0
    memory = [(m.type, m.id) for m in s.memory_usage]
    assert ("CPU", 0) in memory
    assert all(m.byte_size > 0 for m in s.memory_usage if m.type == "CPU")


async def test_64_requests_batched_into_one_execution(stats_server: ServerProcess) -> None:
    rows = np.arange(64 * 4, dtype=np.float32).reshape(64, 1, 4)
    async with aioclient.InferenceServerClient(stats_server.url) as aio:
        results = await asyncio.gather(
            *(aio.infer("batcher", [infer_input("INPUT0", rows[i], "FP32")]) for i in range(64))
        )
        for i, result in enumerate(results):  # each request got its own row back
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), rows[i])
        s = (await aio.get_inference_statistics("batcher")).model_stats[0]
    assert s.inference_count == 64
    assert s.execution_count == 1
    assert [(b.batch_size, counts(b.compute_infer)) for b in s.batch_stats] == [(64, 1)]
    inf = s.inference_stats
    for field in ("success", "queue", "compute_input", "compute_infer", "compute_output"):
        assert counts(getattr(inf, field)) == 64, field
    assert counts(inf.fail) == 0
    assert counts(s.response_stats["0"].success) == 64


def test_refused_requests_are_not_failures(client: grpcclient.InferenceServerClient) -> None:
    """As in Triton: a request refused by the request checks never became the model's
    request, so it counts nowhere (``fail`` counts requests the model accepted and failed)."""
    a, b = pair(1, 1)
    check_add_sub(client.infer("failing", add_sub_inputs(a, b)), a, b)
    first = stats(client, "failing").last_inference
    assert first > 0

    too_big = np.ones((9, 3), dtype=np.float32)  # batch 9 > max_batch_size 8
    expect_error(
        lambda: client.infer("failing", add_sub_inputs(too_big, too_big)),
        "INVALID_ARGUMENT",
        contains=["failing"],
    )
    expect_error(  # INPUT1 missing
        lambda: client.infer("failing", [infer_input("INPUT0", a, "FP32")]),
        "INVALID_ARGUMENT",
        contains=["INPUT1"],
    )
    time.sleep(0.01)
    check_add_sub(client.infer("failing", add_sub_inputs(a, b)), a, b)

    s = stats(client, "failing")
    inf = s.inference_stats
    assert counts(inf.fail) == 0
    assert counts(inf.success) == 2
    assert s.inference_count == 2 and s.execution_count == 2
    assert counts(inf.compute_infer) == 2  # failed requests never reached the model
    assert counts(s.response_stats["0"].success) == counts(inf.success)
    assert s.last_inference > first


def test_statistics_selection(client: grpcclient.InferenceServerClient) -> None:
    every = client.get_inference_statistics().model_stats
    assert sorted((s.name, s.version) for s in every) == sorted(
        (name, "1") for name in (*ADD_SUB_MODELS, "cached", "batcher")
    )
    one = client.get_inference_statistics("selection", "1").model_stats
    assert [(s.name, s.version) for s in one] == [("selection", "1")]
    # TRITONSERVER_ServerModelStatistics' answers (checked on the reference).
    expect_error(
        lambda: client.get_inference_statistics("no_such_model"),
        "INVALID_ARGUMENT",
        "requested model 'no_such_model' is not available",
    )
    expect_error(
        lambda: client.get_inference_statistics("selection", "7"),
        "INVALID_ARGUMENT",
        "requested model version is not available for model 'selection'",
    )


async def test_concurrent_updates_lose_nothing(stats_server: ServerProcess) -> None:
    """200 requests from 8 concurrent clients, batch sizes 1..4: exact totals."""
    rng = np.random.default_rng(5)
    sizes = [int(n) for n in rng.integers(1, 5, size=200)]
    plan = [sizes[i::8] for i in range(8)]

    async def one_client(mine: list[int], seed: int) -> None:
        async with aioclient.InferenceServerClient(stats_server.url) as aio:
            for j, rows in enumerate(mine):
                a, b = pair(rows, seed * 1000 + j)
                check_add_sub(await aio.infer("concurrent", add_sub_inputs(a, b)), a, b)

    await asyncio.gather(*(one_client(mine, i) for i, mine in enumerate(plan)))
    async with aioclient.InferenceServerClient(stats_server.url) as aio:
        s = (await aio.get_inference_statistics("concurrent")).model_stats[0]
    assert s.inference_count == sum(sizes)
    assert s.execution_count == 200
    inf = s.inference_stats
    for field in ("success", "queue", "compute_input", "compute_infer", "compute_output"):
        assert counts(getattr(inf, field)) == 200, field
    assert counts(inf.fail) == 0
    assert {b.batch_size: counts(b.compute_infer) for b in s.batch_stats} == {
        n: sizes.count(n) for n in set(sizes)
    }
    assert counts(s.response_stats["0"].success) == 200


# --- the response cache -----------------------------------------------------------------------


def test_cache_hit_and_miss(client: grpcclient.InferenceServerClient) -> None:
    a, b = pair(2, 10)
    computed = client.infer("cached", add_sub_inputs(a, b))
    check_add_sub(computed, a, b)
    cached = client.infer("cached", add_sub_inputs(a, b))
    for name in ("OUTPUT0", "OUTPUT1"):
        np.testing.assert_array_equal(cached.as_numpy(name), computed.as_numpy(name))
        assert cached.as_numpy(name).shape == (2, 3)
    assert cached.get_response().model_version == "1"

    s = stats(client, "cached")
    inf = s.inference_stats
    assert counts(inf.cache_miss) == 1 and counts(inf.cache_hit) == 1
    assert inf.cache_hit.ns > 0 and inf.cache_miss.ns > 0
    assert counts(inf.success) == 2 and counts(inf.queue) == 2  # both include hits
    assert s.inference_count == 2 and s.execution_count == 1  # only the miss (batch 2)
    assert counts(inf.compute_infer) == 1
    assert [(b.batch_size, counts(b.compute_infer)) for b in s.batch_stats] == [(2, 1)]

    c, d = pair(2, 11)  # another input: another miss
    check_add_sub(client.infer("cached", add_sub_inputs(c, d)), c, d)
    check_add_sub(client.infer("cached", add_sub_inputs(a, b)), a, b)  # still cached
    inf = stats(client, "cached").inference_stats
    assert counts(inf.cache_miss) == 2 and counts(inf.cache_hit) == 2
    assert counts(inf.success) == 4 and counts(inf.compute_infer) == 2


def test_cache_not_used_by_model_without_response_cache(
    client: grpcclient.InferenceServerClient,
) -> None:
    a, b = pair(1, 12)
    for _ in range(3):
        check_add_sub(client.infer("uncached", add_sub_inputs(a, b)), a, b)
    s = stats(client, "uncached")
    inf = s.inference_stats
    assert counts(inf.cache_hit) == 0 and counts(inf.cache_miss) == 0
    assert s.execution_count == 3 and counts(inf.success) == 3


def test_cache_evicts_least_recently_used(tmp_path: Path) -> None:
    """A cache with room for one [1, 3] add_sub response (2 x 12 bytes + a 32-byte key)."""
    write_add_sub(tmp_path, "cached", CACHE_ENABLED)
    with (
        running_server([tmp_path], extra_args=["--cache-config", "local,size=100"]) as server,
        grpcclient.InferenceServerClient(server.url) as c,
    ):
        (a, b), (x, y) = pair(1, 20), pair(1, 21)
        for first, second in [(a, b), (x, y), (a, b)]:  # A, B (evicts A), A: all misses
            check_add_sub(c.infer("cached", add_sub_inputs(first, second)), first, second)
        inf = stats(c, "cached").inference_stats
        assert counts(inf.cache_miss) == 3 and counts(inf.cache_hit) == 0
        check_add_sub(c.infer("cached", add_sub_inputs(a, b)), a, b)  # A is the one kept
        s = stats(c, "cached")
        assert counts(s.inference_stats.cache_hit) == 1
        assert counts(s.inference_stats.cache_miss) == 3
        assert s.execution_count == 3 and counts(s.inference_stats.success) == 4
