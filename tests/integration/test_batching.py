"""Schedulers end to end: dynamic batching and parallel instances, seen through statistics."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as aioclient
from models import make_config, mlp_model, mlp_reference, write_model
from server_process import ServerProcess

WIDTH = 256


def _mlp_config(name: str, extra: str, count: int = 1, width: int = WIDTH) -> str:
    return make_config(
        name,
        [("INPUT0", "FP32", [width])],
        [("OUTPUT0", "FP32", [width])],
        max_batch_size=64,
        instance_count=count,
        extra=extra,
    )


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("batching_repo")
    model = mlp_model(WIDTH, 3)
    write_model(root, "mlp_held", model, _mlp_config("mlp_held", "dynamic_batching { }"))
    write_model(
        root,
        "mlp_delay",
        model,
        _mlp_config("mlp_delay", "dynamic_batching { max_queue_delay_microseconds: 100000 }"),
    )
    write_model(root, "mlp_plain", model, _mlp_config("mlp_plain", ""))
    return root


@pytest.fixture(scope="module")
def server(repo: Path) -> Iterator[ServerProcess]:
    # Triton's test hook: the batcher holds until 64 requests are queued (first batch only).
    proc = ServerProcess([repo], env={"TRITONSERVER_DELAY_SCHEDULER": "64"}).start()
    yield proc
    assert proc.stop() == 0, proc.log


async def _fire(url: str, model: str, count: int) -> list[np.ndarray]:
    client = aioclient.InferenceServerClient(url)
    try:

        async def one(i: int) -> np.ndarray:
            x = np.full((1, WIDTH), i / count, dtype=np.float32)
            tensor = grpcclient.InferInput("INPUT0", [1, WIDTH], "FP32")
            tensor.set_data_from_numpy(x)
            result = await client.infer(model, [tensor], request_id=str(i))
            assert result.get_response().id == str(i)
            return result.as_numpy("OUTPUT0")

        return await asyncio.gather(*(one(i) for i in range(count)))
    finally:
        await client.close()


def _stats(url: str, model: str) -> object:
    with grpcclient.InferenceServerClient(url) as client:
        return client.get_inference_statistics(model).model_stats[0]


def test_64_concurrent_requests_make_one_batch_and_each_gets_its_rows(
    server: ServerProcess,
) -> None:
    outputs = asyncio.run(_fire(server.url, "mlp_held", 64))
    for i, out in enumerate(outputs):
        x = np.full((1, WIDTH), i / 64, dtype=np.float32)
        np.testing.assert_allclose(out, mlp_reference(x, WIDTH, 3), rtol=1e-4, atol=1e-4)
    stats = _stats(server.url, "mlp_held")
    assert stats.inference_count == 64
    assert stats.execution_count == 1
    assert [(b.batch_size, b.compute_infer.count) for b in stats.batch_stats] == [(64, 1)]
    assert stats.inference_stats.success.count == 64
    assert stats.inference_stats.queue.count == 64
    assert stats.inference_stats.compute_infer.count == 64
    assert stats.last_inference > 0


def test_queue_delay_batches_concurrent_requests(server: ServerProcess) -> None:
    asyncio.run(_fire(server.url, "mlp_delay", 64))
    stats = _stats(server.url, "mlp_delay")
    assert stats.inference_count == 64
    assert stats.execution_count < 64
    assert sum(b.batch_size * b.compute_infer.count for b in stats.batch_stats) == 64


def test_without_dynamic_batching_every_request_executes_alone(server: ServerProcess) -> None:
    asyncio.run(_fire(server.url, "mlp_plain", 16))
    stats = _stats(server.url, "mlp_plain")
    assert (stats.inference_count, stats.execution_count) == (16, 16)
    assert [b.batch_size for b in stats.batch_stats] == [1]


def test_one_request_of_batch_8_counts_8_inferences_and_one_execution(
    server: ServerProcess,
) -> None:
    with grpcclient.InferenceServerClient(server.url) as client:
        before = client.get_inference_statistics("mlp_plain").model_stats[0]
        x = np.random.default_rng(0).random((8, WIDTH), dtype=np.float32)
        tensor = grpcclient.InferInput("INPUT0", [8, WIDTH], "FP32")
        tensor.set_data_from_numpy(x)
        client.infer("mlp_plain", [tensor])
        after = client.get_inference_statistics("mlp_plain").model_stats[0]
    assert after.inference_count - before.inference_count == 8
    assert after.execution_count - before.execution_count == 1


def test_statistics_filters_and_errors(server: ServerProcess) -> None:
    with grpcclient.InferenceServerClient(server.url) as client:
        names = {s.name for s in client.get_inference_statistics().model_stats}
        assert names == {"mlp_held", "mlp_delay", "mlp_plain"}
        one = client.get_inference_statistics("mlp_plain", "1").model_stats
        assert [(s.name, s.version) for s in one] == [("mlp_plain", "1")]
        from tritonclient.utils import InferenceServerException

        # Triton's TRITONSERVER_ServerModelStatistics texts.
        with pytest.raises(InferenceServerException, match="'nope' is not available"):
            client.get_inference_statistics("nope")
        with pytest.raises(InferenceServerException, match="version is not available for model"):
            client.get_inference_statistics("mlp_plain", "9")


@pytest.fixture(scope="module")
def parallel_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("parallel_repo")
    model = mlp_model(1024, 8)
    one_thread = 'parameters { key: "intra_op_thread_count" value: { string_value: "1" } }'
    for name, count in (("mlp_x1", 1), ("mlp_x2", 2)):
        write_model(root, name, model, _mlp_config(name, one_thread, count, width=1024))
    return root


def test_two_instances_execute_in_parallel(parallel_repo: Path) -> None:
    """Pairs of simultaneous requests: with one instance the second of each pair waits in
    the queue for a whole execution; with two instances neither waits. Queue time, not
    speed-up, is the measure: these machines' two vCPUs may share one physical core."""

    async def pairs(url: str, model: str, rounds: int) -> None:
        client = aioclient.InferenceServerClient(url)
        x = np.random.default_rng(1).random((64, 1024), dtype=np.float32)
        tensor = grpcclient.InferInput("INPUT0", [64, 1024], "FP32")
        tensor.set_data_from_numpy(x)
        await client.infer(model, [tensor])  # warm-up
        for _ in range(rounds):
            await asyncio.gather(client.infer(model, [tensor]), client.infer(model, [tensor]))
        await client.close()

    def queue_per_infer(url: str, model: str) -> float:
        stats = _stats(url, model)
        infer = stats.inference_stats.compute_infer
        return stats.inference_stats.queue.ns / (infer.ns / infer.count)

    with ServerProcess([parallel_repo]) as server:
        for model in ("mlp_x1", "mlp_x2"):
            asyncio.run(pairs(server.url, model, 5))
            assert _stats(server.url, model).execution_count == 11
        serial = queue_per_infer(server.url, "mlp_x1")
        parallel = queue_per_infer(server.url, "mlp_x2")
    # One instance: 5 requests each waited about one execution. Two: nobody waited for
    # an execution, only (on a busy machine) for a core: well under half of one instance's.
    assert serial > 2.5, f"one instance: queued {serial:.2f} executions in total"
    assert parallel < serial / 2, (
        f"two instances queued {parallel:.2f} executions, one {serial:.2f}"
    )


def test_stream_requests_are_scheduled_concurrently(server: ServerProcess) -> None:
    """16 requests on one stream to a batching model end up in shared executions, which
    only happens if the server does not wait for each response before the next request."""
    import queue

    results: queue.Queue[tuple[object, object]] = queue.Queue()
    with grpcclient.InferenceServerClient(server.url) as client:
        before = client.get_inference_statistics("mlp_delay").model_stats[0]
        client.start_stream(callback=lambda result, error: results.put((result, error)))
        for i in range(16):
            tensor = grpcclient.InferInput("INPUT0", [1, WIDTH], "FP32")
            tensor.set_data_from_numpy(np.full((1, WIDTH), i, dtype=np.float32))
            client.async_stream_infer("mlp_delay", [tensor], request_id=f"s{i}")
        received = {}
        for _ in range(16):
            result, error = results.get(timeout=30)
            assert error is None, error
            received[result.get_response().id] = result.as_numpy("OUTPUT0")
        client.stop_stream()
        after = client.get_inference_statistics("mlp_delay").model_stats[0]
    assert sorted(received) == sorted(f"s{i}" for i in range(16))
    for i in range(16):
        x = np.full((1, WIDTH), i, dtype=np.float32)
        np.testing.assert_allclose(received[f"s{i}"], mlp_reference(x, WIDTH, 3), rtol=1e-3)
    assert after.inference_count - before.inference_count == 16
    assert after.execution_count - before.execution_count < 16


def test_request_whose_deadline_passes_while_queued_is_never_executed(repo: Path) -> None:
    """The batcher holds until 3 requests are queued (Triton's test hook). A request whose
    client deadline passes meanwhile is dropped: the batch that runs has only the 3 others."""
    from tritonclient.utils import InferenceServerException

    with ServerProcess([repo], env={"TRITONSERVER_DELAY_SCHEDULER": "3"}) as server:
        with grpcclient.InferenceServerClient(server.url) as client:
            tensor = grpcclient.InferInput("INPUT0", [1, WIDTH], "FP32")
            tensor.set_data_from_numpy(np.ones((1, WIDTH), dtype=np.float32))
            with pytest.raises(InferenceServerException, match="Deadline"):
                client.infer("mlp_held", [tensor], client_timeout=0.3)
        # The server drops it when it learns the caller left (counted as a CANCELED
        # failure, as Triton counts it). Under --frontends N that news crosses the
        # engine channel after the deadline, so the others are sent once it has landed:
        # otherwise they could join the queue first and the hook release all four.
        deadline = time.monotonic() + 10
        while _stats(server.url, "mlp_held").inference_stats.fail.count < 1:
            assert time.monotonic() < deadline, "the expired request was never dropped"
            time.sleep(0.01)
        asyncio.run(_fire(server.url, "mlp_held", 3))
        stats = _stats(server.url, "mlp_held")
        assert stats.inference_stats.fail.count == 1
        assert (stats.inference_count, stats.execution_count) == (3, 1)
        assert [b.batch_size for b in stats.batch_stats] == [3]
