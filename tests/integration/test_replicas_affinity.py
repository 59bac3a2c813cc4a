"""Client affinity (deploy/nginx/render.py --client-affinity) against the default routing,
on two replicas behind nginx on loopback, with Triton's own client patterns.

Some clients keep state on the replica without telling the balancer: a system
shared-memory region is registered by one request and used by the next ones (Triton's
simple_*_shm_client examples); a sequence is sent without the ``triton-sequence-id``
header (Triton's non-streaming sequence examples). Under the default routing those
requests are balanced like stateless ones and reach different replicas: the tests show
the resulting 404 / START-flag errors and silently wrong running sums exactly where the
access log says a request left its client's replica. With client affinity (every request
hashed on the client's address) the same clients get correct results over HTTP and gRPC,
and clients at different addresses still spread over the replicas.

Needs Debian's nginx (scripts/bootstrap.sh installs it when run as root); skipped with the
reason otherwise.
"""

from __future__ import annotations

import collections
import http.client
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from models import write_model
from replica_cluster import (
    CLIENT_ADDRESS,
    AccessRecord,
    Balancer,
    Cluster,
    Replica,
    nginx_missing,
)
from sequence_models import accumulator_config, accumulator_model
from shm_support import key_of, region, write_shm_models
from tritonclient.utils import InferenceServerException

pytestmark = pytest.mark.skipif(nginx_missing() is not None, reason=str(nginx_missing()))

ACCUMULATOR = "accumulator"
INT32_BYTES = 16 * 4
START_FLAG_ERROR = "must specify the START flag on the first request of the sequence"
PROTOCOLS = {"http": httpclient, "grpc": grpcclient}


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = write_shm_models(tmp_path_factory.mktemp("affinity"))
    # Sequences the default routing leaves open (their END went elsewhere) hold a slot
    # until the idle timeout; 16 slots per replica is more than these tests leave open.
    config = accumulator_config(ACCUMULATOR, max_batch_size=8, idle_us=60_000_000)
    write_model(repo, ACCUMULATOR, accumulator_model(), config)
    return repo


@pytest.fixture(scope="module")
def cluster(repository: Path) -> Iterator[Cluster]:
    """Two replicas behind nginx in client-affinity mode."""
    with Cluster(
        [Replica([repository]) for _ in range(2)], client_affinity=CLIENT_ADDRESS
    ) as running:
        yield running


@pytest.fixture(scope="module")
def default_balancer(cluster: Cluster) -> Iterator[Balancer]:
    """A second nginx, with the default routing, in front of the same two replicas."""
    balancer = Balancer(
        [r.grpc_url for r in cluster.replicas], [r.http_url for r in cluster.replicas]
    )
    try:
        yield balancer.start()
    finally:
        balancer.stop()


@pytest.fixture
def affinity(cluster: Cluster) -> Balancer:
    assert cluster.balancer is not None
    return cluster.balancer


@pytest.fixture(params=sorted(PROTOCOLS))
def protocol(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _url(balancer: Balancer, protocol: str) -> str:
    return balancer.http_url if protocol == "http" else balancer.grpc_url


def _replica_urls(cluster: Cluster, protocol: str) -> list[str]:
    return [r.http_url if protocol == "http" else r.grpc_url for r in cluster.replicas]


class NewRecords:
    """The access-log lines a block of requests adds (one line per request, in order:
    the requests are sent one at a time)."""

    def __init__(self, balancer: Balancer) -> None:
        self._balancer = balancer
        self._before = len(balancer.access_log())

    def __call__(self, count: int) -> list[AccessRecord]:
        """The ``count`` new lines: nginx may log a request just after its client has the
        answer, so the last line may take a moment."""
        deadline = time.monotonic() + 5
        while True:
            records = self._balancer.access_log()[self._before :]
            if len(records) >= count or time.monotonic() > deadline:
                break
            time.sleep(0.02)
        assert len(records) == count, records
        assert all(len(r.upstreams) == 1 for r in records), records  # nothing retried
        return records


def _unregister_everywhere(cluster: Cluster) -> None:
    for replica in cluster.replicas:
        with grpcclient.InferenceServerClient(replica.grpc_url) as direct:
            direct.unregister_system_shared_memory()


def _registered(cluster: Cluster) -> list[set[str]]:
    """The system regions each replica holds, asked of it directly."""
    names = []
    for replica in cluster.replicas:
        with grpcclient.InferenceServerClient(replica.grpc_url) as direct:
            status = direct.get_system_shared_memory_status(as_json=True)
        names.append(set(status.get("regions", {})))
    return names


def _shm_tensors(client: ModuleType) -> tuple[list[Any], list[Any]]:
    """simple's inputs in region input_data (offsets 0 and 64), outputs in output_data."""
    inputs = [client.InferInput(name, [1, 16], "INT32") for name in ("INPUT0", "INPUT1")]
    inputs[0].set_shared_memory("input_data", INT32_BYTES)
    inputs[1].set_shared_memory("input_data", INT32_BYTES, offset=INT32_BYTES)
    outputs = [client.InferRequestedOutput(name) for name in ("OUTPUT0", "OUTPUT1")]
    outputs[0].set_shared_memory("output_data", INT32_BYTES)
    outputs[1].set_shared_memory("output_data", INT32_BYTES, offset=INT32_BYTES)
    return inputs, outputs


def _check_outputs(out_handle: Any, in0: np.ndarray, in1: np.ndarray) -> None:
    total = shm.get_contents_as_numpy(out_handle, np.int32, [1, 16])
    difference = shm.get_contents_as_numpy(out_handle, np.int32, [1, 16], INT32_BYTES)
    np.testing.assert_array_equal(total[0], in0 + in1)
    np.testing.assert_array_equal(difference[0], in0 - in1)


def test_shared_memory_works_with_client_affinity(
    cluster: Cluster, affinity: Balancer, protocol: str
) -> None:
    """simple_{http,grpc}_shm_client.py through the balancer: unregister all, register an
    output and an input region, infer with both (three times, new inputs each time),
    read the results from the output region, check the status, unregister."""
    client_module = PROTOCOLS[protocol]
    in0 = np.arange(16, dtype=np.int32)
    in1 = np.ones(16, dtype=np.int32)
    new = NewRecords(affinity)
    with (
        client_module.InferenceServerClient(_url(affinity, protocol)) as client,
        region("output_data", 2 * INT32_BYTES) as out_handle,
        region("input_data", 2 * INT32_BYTES, in0, in1) as in_handle,
    ):
        client.unregister_system_shared_memory()
        client.register_system_shared_memory("output_data", key_of(out_handle), 2 * INT32_BYTES)
        client.register_system_shared_memory("input_data", key_of(in_handle), 2 * INT32_BYTES)
        inputs, outputs = _shm_tensors(client_module)
        for step in range(3):
            a, b = in0 * (step + 1), in1 + step
            shm.set_shared_memory_region(in_handle, [a, b])
            client.infer("simple", inputs, outputs=outputs)
            _check_outputs(out_handle, a, b)
        status = client.get_system_shared_memory_status()
        names = [r["name"] for r in status] if protocol == "http" else list(status.regions)
        assert sorted(names) == ["input_data", "output_data"]
        client.unregister_system_shared_memory()
    records = new(8)
    assert {r.client for r in records} == {"127.0.0.1"}
    assert len({r.upstreams[0] for r in records}) == 1, records  # one replica for it all
    assert _registered(cluster) == [set(), set()]


def test_shared_memory_fails_with_the_default_routing(
    cluster: Cluster, default_balancer: Balancer, protocol: str
) -> None:
    """The same client without affinity: registration and inference are balanced over the
    replicas (least_conn), so a region is registered on one replica only, and every
    inference sent to a replica lacking a region fails with Triton's 'Unable to find'
    error (HTTP 404), as simple_http_shm_client.py did through nginx."""
    client_module = PROTOCOLS[protocol]
    replicas = _replica_urls(cluster, protocol)
    in0 = np.arange(16, dtype=np.int32)
    in1 = np.ones(16, dtype=np.int32)
    outcomes: list[InferenceServerException | None] = []
    new = NewRecords(default_balancer)
    try:
        with (
            client_module.InferenceServerClient(_url(default_balancer, protocol)) as client,
            region("output_data", 2 * INT32_BYTES) as out_handle,
            region("input_data", 2 * INT32_BYTES, in0, in1) as in_handle,
        ):
            client.register_system_shared_memory("output_data", key_of(out_handle), 2 * INT32_BYTES)
            client.register_system_shared_memory("input_data", key_of(in_handle), 2 * INT32_BYTES)
            registered = _registered(cluster)
            inputs, outputs = _shm_tensors(client_module)
            for _ in range(4):
                try:
                    client.infer("simple", inputs, outputs=outputs)
                    _check_outputs(out_handle, in0, in1)
                    outcomes.append(None)
                except InferenceServerException as exc:
                    outcomes.append(exc)
    finally:
        _unregister_everywhere(cluster)
    records = new(6)
    # Each region is on the replica its registration reached, and nowhere else.
    registered_on = dict(zip(("output_data", "input_data"), records[:2], strict=True))
    assert registered == [
        {name for name, record in registered_on.items() if record.upstreams[0] == url}
        for url in replicas
    ]
    registered_at = [replicas.index(r.upstreams[0]) for r in records[:2]]
    inferred_on = [replicas.index(r.upstreams[0]) for r in records[2:]]
    assert len(set(registered_at + inferred_on)) > 1, "least_conn kept to one replica"
    for at, outcome in zip(inferred_on, outcomes, strict=True):
        if registered[at] >= {"output_data", "input_data"}:
            assert outcome is None
        else:
            assert outcome is not None, f"inference on replica {at} should have failed"
            assert "Unable to find" in str(outcome), outcome
            assert "shared memory region" in str(outcome), outcome
            if protocol == "http":
                assert outcome.status() == "404", outcome
    assert any(outcome is not None for outcome in outcomes)


def _sequence(
    client_module: ModuleType, url: str, sequence: int, values: list[int]
) -> list[int | InferenceServerException]:
    """One sequence sent as Triton's non-streaming sequence examples send it: sequence_id,
    start and end flags, and no triton-sequence-id header. The running sums (or errors)."""
    results: list[int | InferenceServerException] = []
    with client_module.InferenceServerClient(url) as client:
        for step, value in enumerate(values):
            tensor = client_module.InferInput("INPUT", [1, 1], "INT32")
            tensor.set_data_from_numpy(np.array([[value]], dtype=np.int32))
            try:
                result = client.infer(
                    ACCUMULATOR,
                    [tensor],
                    sequence_id=sequence,
                    sequence_start=step == 0,
                    sequence_end=step == len(values) - 1,
                )
                results.append(int(result.as_numpy("OUTPUT").item()))
            except InferenceServerException as exc:
                results.append(exc)
    return results


def test_sequences_without_the_header_work_with_client_affinity(
    affinity: Balancer, protocol: str
) -> None:
    """Three sequences without the header, their steps interleaved (as
    simple_*_sequence_sync_infer_client.py interleaves two): every running sum right."""
    client_module = PROTOCOLS[protocol]
    first = 100 if protocol == "http" else 200
    values = {first + i: [i + 1, 10 * (i + 1), -3, 7, 2 * i] for i in range(3)}
    new = NewRecords(affinity)
    sums: dict[int, list[int]] = collections.defaultdict(list)
    with client_module.InferenceServerClient(_url(affinity, protocol)) as client:
        for step in range(5):
            for sequence, steps in values.items():
                tensor = client_module.InferInput("INPUT", [1, 1], "INT32")
                tensor.set_data_from_numpy(np.array([[steps[step]]], dtype=np.int32))
                result = client.infer(
                    ACCUMULATOR,
                    [tensor],
                    sequence_id=sequence,
                    sequence_start=step == 0,
                    sequence_end=step == 4,
                )
                sums[sequence].append(int(result.as_numpy("OUTPUT").item()))
    for sequence, steps in values.items():
        assert sums[sequence] == [int(v) for v in np.cumsum(steps)], sequence
    records = new(15)
    assert {r.sequence for r in records} == {"-"}, records
    assert len({r.upstreams[0] for r in records}) == 1, records


def test_sequences_without_the_header_fail_with_the_default_routing(
    cluster: Cluster, default_balancer: Balancer, protocol: str
) -> None:
    """The same header-less sequence through the default routing: its steps are balanced
    like stateless requests. A step that reaches a replica other than its START's fails
    with the START-flag error; a later step back on the START's replica answers a running
    sum of only the steps that went there, with no error: a silently wrong result."""
    client_module = PROTOCOLS[protocol]
    replicas = _replica_urls(cluster, protocol)
    sequence = 300 if protocol == "http" else 400
    values = [5, 10, 20, 40, 80, 160]
    new = NewRecords(default_balancer)
    results = _sequence(client_module, _url(default_balancer, protocol), sequence, values)
    served_by = [replicas.index(r.upstreams[0]) for r in new(len(values))]
    start_replica = served_by[0]
    assert len(set(served_by)) > 1, "least_conn kept the sequence on one replica"
    state = 0  # the running sum the START's replica holds
    for value, at, result in zip(values, served_by, results, strict=True):
        if at == start_replica:
            state += value
            assert result == state, (served_by, results)
        else:
            assert isinstance(result, InferenceServerException), (served_by, results)
            assert START_FLAG_ERROR in str(result), result
    correct = [int(v) for v in np.cumsum(values)]
    assert results != correct


def test_client_affinity_spreads_clients_by_address(cluster: Cluster, affinity: Balancer) -> None:
    """Each client address sticks to one replica; twenty addresses (127.0.0.2-21, loopback
    sources) spread over both. Each request on a new connection: the address decides."""
    new = NewRecords(affinity)
    for host in range(2, 22):
        for _ in range(3):
            connection = http.client.HTTPConnection(
                "127.0.0.1", affinity.http_port, timeout=10, source_address=(f"127.0.0.{host}", 0)
            )
            try:
                connection.request("GET", "/v2/models/simple/ready")
                assert connection.getresponse().status == 200
            finally:
                connection.close()
    by_client: dict[str, set[str]] = collections.defaultdict(set)
    for record in new(60):
        by_client[record.client].add(record.upstreams[0])
    assert len(by_client) == 20 and all(len(u) == 1 for u in by_client.values()), by_client
    per_replica = collections.Counter(next(iter(u)) for u in by_client.values())
    assert set(per_replica) == set(_replica_urls(cluster, "http")), per_replica
