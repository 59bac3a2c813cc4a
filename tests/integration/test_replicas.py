"""Three replicas behind the shipped nginx configuration (deploy/nginx/), on loopback.

Each replica is a service and its REST gateway; nginx balances gRPC (grpc_pass) over the
services and REST (proxy_pass) over the gateways. The tests show what a Triton user behind
a balancer needs: stateless load spreads over the replicas; every request of a sequence
reaches the replica that holds its state (the ``triton-sequence-id`` header, set by the
client for gRPC and by the gateway for REST; a stream is sticky by itself); a replica
drained with SIGTERM under load fails no request; a replica killed fails only its own
sequences, each with Triton's clear START-flag error, never a silent new sequence
elsewhere.

Needs Debian's nginx (scripts/bootstrap.sh installs it when run as root); skipped with the
reason otherwise.
"""

from __future__ import annotations

import asyncio
import collections
import random
import shutil
import signal
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as aioclient
import tritonclient.http as httpclient
from models import write_model
from replica_cluster import SEQUENCE_HEADER, Cluster, GatewayProcess, Replica, nginx_missing
from sequence_models import accumulator_config, accumulator_model
from server_process import DEFAULT_REPOSITORY, REPO_ROOT
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

pytestmark = pytest.mark.skipif(nginx_missing() is not None, reason=str(nginx_missing()))

ACCUMULATOR = "accumulator"
START_FLAG_ERROR = "must specify the START flag on the first request of the sequence"


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("replicas")
    shutil.copytree(DEFAULT_REPOSITORY / "add_sub", repo / "add_sub")
    # Enough sequence slots for every sequence a replica may get at once (Direct: one slot
    # per batch row and instance), and an idle timeout no test step comes near.
    config = accumulator_config(
        ACCUMULATOR, max_batch_size=32, instance_count=2, idle_us=120_000_000
    )
    write_model(repo, ACCUMULATOR, accumulator_model(), config)
    # One sleeping Python instance: a request that stays in flight while a replica drains.
    sleepy = repo / "sleepy"
    shutil.copytree(REPO_ROOT / "tests" / "python_models" / "sleepy", sleepy)
    text = (sleepy / "config.pbtxt").read_text().replace("count: 2", "count: 1")
    (sleepy / "config.pbtxt").write_text(text)
    return repo


@pytest.fixture(scope="module")
def cluster(repository: Path) -> Iterator[Cluster]:
    replicas = [Replica([repository], ["--exit-timeout-secs", "20"]) for _ in range(3)]
    with Cluster(replicas) as running:
        yield running


@pytest.fixture
async def client(cluster: Cluster) -> AsyncIterator[aioclient.InferenceServerClient]:
    assert cluster.balancer is not None
    async with aioclient.InferenceServerClient(cluster.balancer.grpc_url) as c:
        yield c


def _add_sub_inputs() -> list[grpcclient.InferInput]:
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    inputs = [grpcclient.InferInput(n, [1, 16], "FP32") for n in ("INPUT0", "INPUT1")]
    for tensor in inputs:
        tensor.set_data_from_numpy(a)
    return inputs


def _value(value: int, module: Any = grpcclient) -> list[Any]:
    tensor = module.InferInput("INPUT", [1, 1], "INT32")
    tensor.set_data_from_numpy(np.array([[value]], dtype=np.int32))
    return [tensor]


def _successes(replica: Replica, model: str) -> int:
    with grpcclient.InferenceServerClient(replica.grpc_url) as direct:
        stats = direct.get_inference_statistics(model, as_json=True)
    return sum(int(s["inference_stats"]["success"].get("count", 0)) for s in stats["model_stats"])


async def _step(
    client: aioclient.InferenceServerClient, sequence: int, value: int, start: bool, end: bool
) -> int:
    result = await client.infer(
        ACCUMULATOR,
        _value(value),
        sequence_id=sequence,
        sequence_start=start,
        sequence_end=end,
        headers={SEQUENCE_HEADER: str(sequence)},
    )
    return int(result.as_numpy("OUTPUT").item())


class Sequences:
    """Sequences driven in lockstep rounds: each round sends the next step of every live
    sequence at once, in a new random order (interleaved correlation ids)."""

    def __init__(self, ids: list[int], steps: int, seed: int) -> None:
        rng = random.Random(seed)
        self.ids = ids
        self.steps = steps
        self.values = {i: [rng.randint(-50, 50) for _ in range(steps)] for i in ids}
        self.sums: dict[int, list[int]] = {i: [] for i in ids}
        self.errors: dict[int, InferenceServerException] = {}
        self._rng = rng

    async def rounds(self, client: aioclient.InferenceServerClient, first: int, last: int) -> None:
        for step in range(first, last):
            live = [i for i in self.ids if i not in self.errors]
            self._rng.shuffle(live)
            results = await asyncio.gather(
                *(
                    _step(client, i, self.values[i][step], step == 0, step == self.steps - 1)
                    for i in live
                ),
                return_exceptions=True,
            )
            for sequence, result in zip(live, results, strict=True):
                if isinstance(result, InferenceServerException):
                    self.errors[sequence] = result
                elif isinstance(result, BaseException):
                    raise result
                else:
                    self.sums[sequence].append(result)

    def expected(self, sequence: int) -> list[int]:
        return [int(v) for v in np.cumsum(self.values[sequence][: len(self.sums[sequence])])]


def _restore(replica: Replica) -> None:
    """Start ``replica`` again on its ports, then outwait nginx's fail_timeout (1 s in
    these tests), so the next requests find it re-admitted everywhere."""
    replica.start()
    time.sleep(1.5)


def _replica_of_sequences(cluster: Cluster, ids: list[int]) -> dict[int, str]:
    """Each sequence's replica address, from the balancer's access log; asserts that every
    request of a sequence went to one replica, tried first."""
    assert cluster.balancer is not None
    where: dict[int, set[str]] = collections.defaultdict(set)
    wanted = {str(i) for i in ids}
    for record in cluster.balancer.access_log():
        if record.sequence in wanted:
            where[int(record.sequence)].add(record.upstreams[0])
    assert all(len(addresses) == 1 for addresses in where.values()), where
    return {i: next(iter(where[i])) for i in ids}


async def test_stateless_requests_spread_over_the_replicas(
    cluster: Cluster, client: aioclient.InferenceServerClient
) -> None:
    assert cluster.balancer is not None
    before = [_successes(r, "add_sub") for r in cluster.replicas]
    expected = np.arange(16, dtype=np.float32).reshape(1, 16) * 2

    async def grpc_worker() -> None:
        for _ in range(40):
            result = await client.infer("add_sub", _add_sub_inputs())
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), expected)

    await asyncio.gather(*(grpc_worker() for _ in range(6)))
    # REST through proxy_pass to the gateways.
    with httpclient.InferenceServerClient(cluster.balancer.http_url, concurrency=1) as rest:
        for _ in range(60):
            inputs = [httpclient.InferInput(n, [1, 16], "FP32") for n in ("INPUT0", "INPUT1")]
            for tensor in inputs:
                tensor.set_data_from_numpy(np.arange(16, dtype=np.float32).reshape(1, 16))
            result = rest.infer("add_sub", inputs)
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), expected)
    served = [_successes(r, "add_sub") - b for r, b in zip(cluster.replicas, before, strict=True)]
    assert sum(served) == 300, served
    assert min(served) >= 30, f"per-replica ModelStatistics: {served}"


async def test_interleaved_sequences_stay_on_their_replica(
    cluster: Cluster, client: aioclient.InferenceServerClient
) -> None:
    sequences = Sequences(list(range(1000, 1100)), steps=10, seed=1)
    await sequences.rounds(client, 0, 10)
    assert sequences.errors == {}
    for sequence in sequences.ids:
        assert sequences.sums[sequence] == sequences.expected(sequence), sequence
    where = _replica_of_sequences(cluster, sequences.ids)
    counts = collections.Counter(where.values())
    assert len(counts) == 3, f"sequences per replica: {counts}"


async def test_a_stream_is_sticky_without_the_header(cluster: Cluster) -> None:
    """ModelStreamInfer: the stream is one HTTP/2 stream on one replica for its life."""
    assert cluster.balancer is not None
    ids = [5000 + i for i in range(5)]
    values = {i: [i % 7 + step for step in range(6)] for i in ids}
    async with grpc.aio.insecure_channel(cluster.balancer.grpc_url) as channel:
        stream = service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelStreamInfer()
        for step in range(6):
            for i in ids:
                request = service_pb2.ModelInferRequest(model_name=ACCUMULATOR, id=f"{i}/{step}")
                request.parameters["sequence_id"].int64_param = i
                request.parameters["sequence_start"].bool_param = step == 0
                request.parameters["sequence_end"].bool_param = step == 5
                request.inputs.add(name="INPUT", datatype="INT32", shape=[1, 1])
                request.raw_input_contents.append(np.array([[values[i][step]]], np.int32).tobytes())
                await stream.write(request)
        await stream.done_writing()
        sums: dict[int, list[int]] = collections.defaultdict(list)
        async for reply in stream:
            assert reply.error_message == "", reply.error_message
            i, step = map(int, reply.infer_response.id.split("/"))
            value = np.frombuffer(reply.infer_response.raw_output_contents[0], np.int32)[0]
            sums[i].append((step, int(value)))
    for i in ids:
        assert [v for _, v in sorted(sums[i])] == [int(v) for v in np.cumsum(values[i])]


def test_rest_sequences_stick_by_the_header_or_the_gateway(
    cluster: Cluster, repository: Path
) -> None:
    """REST through nginx's proxy_pass: the client sends the header. REST through one
    gateway in front of the balancer's gRPC port: the gateway sets it from sequence_id."""
    assert cluster.balancer is not None
    shared = GatewayProcess(cluster.balancer.grpc_url).start()
    try:
        for url, headers, first in (
            (cluster.balancer.http_url, True, 7000),  # client -> nginx -> gateway -> service
            (shared.url, False, 8000),  # client -> gateway -> nginx -> service
        ):
            ids = list(range(first, first + 9))
            with httpclient.InferenceServerClient(url) as rest:
                for sequence in ids:
                    total = 0
                    for step in range(4):
                        total += sequence % 5 + step
                        result = rest.infer(
                            ACCUMULATOR,
                            _value(sequence % 5 + step, httpclient),
                            sequence_id=sequence,
                            sequence_start=step == 0,
                            sequence_end=step == 3,
                            headers={SEQUENCE_HEADER: str(sequence)} if headers else None,
                        )
                        assert int(result.as_numpy("OUTPUT").item()) == total
            where = _replica_of_sequences(cluster, ids)
            assert len(set(where.values())) > 1, where  # spread, yet each one sticks
    finally:
        assert shared.stop() == 0


async def test_a_draining_replica_fails_no_request(
    cluster: Cluster, client: aioclient.InferenceServerClient
) -> None:
    """SIGTERM to one replica under gRPC and REST load: no request fails, its in-flight
    work completes, it exits 0, and nginx sends it nothing new."""
    assert cluster.balancer is not None
    victim = cluster.replicas[1]
    failures: list[str] = []
    done = {"grpc": 0, "rest": 0}
    stop_at = time.monotonic() + 60

    async def grpc_worker() -> None:
        while time.monotonic() < stop_at:
            try:
                await client.infer("add_sub", _add_sub_inputs())
                done["grpc"] += 1
            except InferenceServerException as exc:
                failures.append(f"gRPC: {exc}")

    def rest_worker() -> None:
        assert cluster.balancer is not None
        with httpclient.InferenceServerClient(cluster.balancer.http_url) as rest:
            inputs = [httpclient.InferInput(n, [1, 16], "FP32") for n in ("INPUT0", "INPUT1")]
            for tensor in inputs:
                tensor.set_data_from_numpy(np.zeros((1, 16), np.float32))
            while time.monotonic() < stop_at:
                try:
                    rest.infer("add_sub", inputs)
                    done["rest"] += 1
                except InferenceServerException as exc:
                    failures.append(f"REST: {exc}")

    delay = np.array([1500], dtype=np.int32)
    long_input = grpcclient.InferInput("DELAY_MS", [1], "INT32")
    long_input.set_data_from_numpy(delay)
    async with aioclient.InferenceServerClient(victim.grpc_url) as direct:
        workers = [asyncio.create_task(grpc_worker()) for _ in range(4)]
        workers += [asyncio.create_task(asyncio.to_thread(rest_worker)) for _ in range(2)]
        await asyncio.sleep(1.0)
        in_flight = asyncio.create_task(direct.infer("sleepy", [long_input]))
        await asyncio.sleep(0.3)
        before = dict(done)
        victim.send_signal(signal.SIGTERM)
        result = await in_flight  # the request in flight on the victim completes
        assert result.as_numpy("END")[0] - result.as_numpy("START")[0] >= 1.4
        codes = await asyncio.to_thread(victim.wait, 30)
        await asyncio.sleep(0.5)  # load goes on against the two that remain
        stop_at = time.monotonic()
        await asyncio.gather(*workers)
    assert failures == [], failures[:5]
    assert codes == [0, 0], victim.service.log if victim.service else ""
    assert done["grpc"] > before["grpc"] + 20 and done["rest"] > before["rest"] + 5, done
    retried = [
        r
        for r in cluster.balancer.access_log()
        if len(r.upstreams) > 1 and r.upstreams[0] in (victim.grpc_url, victim.http_url)
    ]
    assert retried, "nginx never met the drained replica's closed listener"
    assert all(r.status == 200 and r.upstream_statuses[-1] == "200" for r in retried), retried
    _restore(victim)


async def test_a_killed_replica_fails_only_its_own_sequences(
    cluster: Cluster, client: aioclient.InferenceServerClient
) -> None:
    sequences = Sequences(list(range(3000, 3100)), steps=10, seed=2)
    await sequences.rounds(client, 0, 5)
    assert sequences.errors == {}
    where = _replica_of_sequences(cluster, sequences.ids)
    victim = max(cluster.replicas, key=lambda r: sum(a == r.grpc_url for a in where.values()))
    orphans = {i for i, address in where.items() if address == victim.grpc_url}
    victim.send_signal(signal.SIGKILL)
    victim.wait(10)
    await sequences.rounds(client, 5, 10)
    # Exactly the victim's sequences failed, at their first request after the kill, with
    # Triton's START-flag error from the replica that now gets their id: no silent reset.
    assert set(sequences.errors) == orphans
    for sequence, error in sequences.errors.items():
        assert error.status() == "StatusCode.INVALID_ARGUMENT", error
        assert START_FLAG_ERROR in (error.message() or ""), error
        assert f"sequence {sequence} " in (error.message() or ""), error
        assert len(sequences.sums[sequence]) == 5
    for sequence in set(sequences.ids) - orphans:
        assert sequences.sums[sequence] == sequences.expected(sequence), sequence
    _restore(victim)
