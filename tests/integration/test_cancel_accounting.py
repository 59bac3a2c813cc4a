"""A deadline and cancellation storm: every request that reached a backend is in the
statistics, as Triton records a request when the backend finishes whatever the client did.

Before, a request that executed after its client gave up raised ``execution_count`` but
was neither a success nor a failure (10 of 6,400 in a storm). The models never fail, so
after the storm: successes == inferences executed; every failure is a request cancelled
before it ran, so failures <= cancelled; and the metrics endpoint says the same.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterator

import numpy as np
import pytest
import tritonclient.grpc.aio as aioclient
from integration_support import running_server
from operations_support import metrics_port, scrape
from server_process import ServerProcess
from tritonclient.utils import InferenceServerException

REQUESTS = 240
CONCURRENCY = 12
DELAY_MS = 15

_IDENTITY = """
name: "{name}" backend: "identity" max_batch_size: {mbs}
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] }} ]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
parameters {{ key: "execute_delay_ms" value {{ string_value: "{delay}" }} }}
{extra}
"""
MODELS = {
    "plain": (0, ""),  # the default scheduler
    "batched": (4, "dynamic_batching { max_queue_delay_microseconds: 2000 }"),
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("storm_repo")
    for name, (mbs, extra) in MODELS.items():
        (repo / name / "1").mkdir(parents=True)
        config = _IDENTITY.format(name=name, mbs=mbs, delay=DELAY_MS, extra=extra)
        (repo / name / "config.pbtxt").write_text(config)
    with running_server([repo]) as running:
        yield running


def _inputs(model: str) -> list[aioclient.InferInput]:
    data = np.ones((1, 4), np.float32) if MODELS[model][0] else np.ones(4, np.float32)
    tensor = aioclient.InferInput("INPUT0", list(data.shape), "FP32")
    tensor.set_data_from_numpy(data)
    return [tensor]


async def _storm(url: str, model: str, seed: int) -> int:
    """REQUESTS requests, CONCURRENCY at a time, each with a random deadline (some end in
    the queue, some while executing, some not at all), then one without a deadline: the
    model's one instance runs it after every execution the storm left behind. Returns the
    client's successes."""
    rng = random.Random(seed)
    ok = 0
    async with aioclient.InferenceServerClient(url) as client:
        inputs = _inputs(model)
        pending = list(range(REQUESTS))

        async def worker() -> None:
            nonlocal ok
            while pending:
                pending.pop()
                try:
                    await client.infer(model, inputs, client_timeout=rng.uniform(0.002, 0.12))
                    ok += 1
                except InferenceServerException:
                    pass

        await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
        await client.infer(model, inputs)
    return ok + 1


@pytest.mark.parametrize("model", list(MODELS))
def test_every_executed_request_is_counted_after_a_deadline_storm(
    server: ServerProcess, model: str
) -> None:
    client_ok = asyncio.run(_storm(server.url, model, seed=len(model)))
    metrics = scrape(metrics_port(server))
    success, failure, cancelled, executed = (
        int(metrics[(f"nv_inference_{name}", model, "1")])
        for name in ("request_success", "request_failure", "request_cancelled", "count")
    )
    counts = f"{success=} {failure=} {cancelled=} {executed=} {client_ok=}"
    assert success == executed, counts  # the models never fail: every execution succeeds
    assert success >= client_ok, counts  # more: some ran after their client gave up
    assert cancelled > 0, counts  # the storm did cancel requests
    assert failure <= cancelled, counts  # a failure here is a request dropped unexecuted,
    assert metrics[("nv_inference_request_failure:CANCELED", model, "1")] == failure  # CANCELED
    assert success + failure <= REQUESTS + 1, counts
