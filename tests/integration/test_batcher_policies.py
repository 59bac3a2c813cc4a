"""The dynamic batcher's rule and queue policies end to end: tritonclient against a real server.

The models' executions wait at a gate the test opens (tests/gated_model.py), so "the
instance is busy" is a fact the test controls, not a sleep.
"""

from __future__ import annotations

import queue
from collections.abc import Iterator

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from gated_model import GatedModel, wait_pending, write_gated_model
from integration_support import expect_error, running_server
from server_process import ServerProcess
from tritonclient.utils import InferenceServerException

MAX_U64 = 2**64 - 1


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, GatedModel]:
    root = tmp_path_factory.mktemp("batcher_policies")
    return {
        "full": write_gated_model(
            root, "full", "preferred_batch_size: [ 8 ] default_queue_policy { max_queue_size: 1 }"
        ),
        "reject": write_gated_model(
            root, "reject", "default_queue_policy { default_timeout_microseconds: 100000 }"
        ),
        "preferred": write_gated_model(
            root,
            "preferred",
            "preferred_batch_size: [ 2, 6 ] max_queue_delay_microseconds: 600000000",
        ),
        "levels": write_gated_model(
            root,
            "levels",
            f"priority_levels: {MAX_U64} default_priority_level: 4294967296",
            max_batch_size=2,
        ),
    }


@pytest.fixture(scope="module")
def server(models: dict[str, GatedModel]) -> Iterator[ServerProcess]:
    root = next(iter(models.values())).directory.parent
    with running_server([root]) as proc:
        yield proc


def _inputs(batch: int = 1, value: float = 1.0) -> list[grpcclient.InferInput]:
    tensor = grpcclient.InferInput("INPUT0", [batch, 4], "FP32")
    tensor.set_data_from_numpy(np.full((batch, 4), value, np.float32))
    return [tensor]


class Calls:
    """Asynchronous infers whose results (or errors) arrive on a queue."""

    def __init__(self, client: grpcclient.InferenceServerClient) -> None:
        self.client = client
        self.results: queue.Queue[tuple[str, object]] = queue.Queue()

    def send(self, model: str, name: str, batch: int = 1, **kwargs: object) -> None:
        def done(result: object, error: InferenceServerException | None) -> None:
            self.results.put((name, error if error is not None else result))

        self.client.async_infer(
            model,
            _inputs(batch),
            done,
            request_id=name,
            **kwargs,
        )

    def next(self, timeout: float = 60.0) -> tuple[str, object]:
        return self.results.get(timeout=timeout)


def test_a_full_queue_refuses_with_unavailable(server: ServerProcess, models: dict) -> None:
    with grpcclient.InferenceServerClient(server.url) as client:
        calls = Calls(client)
        calls.send("full", "running", batch=8)
        models["full"].wait_started()
        calls.send("full", "queued")
        wait_pending(server, "full", 2)
        for request_id in ("", "refused"):
            error = expect_error(
                lambda rid=request_id: client.infer("full", _inputs(), request_id=rid),
                "UNAVAILABLE",
            )
            # Triton's text, with the request-id prefix even for a request without one.
            assert error.message() == (
                f"[request id: {request_id or '<id_unknown>'}] Exceeds maximum queue size"
            )
        models["full"].open_gate()
        assert {calls.next()[0], calls.next()[0]} == {"running", "queued"}
        client.infer("full", _inputs())  # the queue has room again


def test_a_timed_out_request_is_rejected_while_the_instance_is_busy(
    server: ServerProcess, models: dict
) -> None:
    with grpcclient.InferenceServerClient(server.url) as client:
        calls = Calls(client)
        calls.send("reject", "running")
        models["reject"].wait_started()
        # Queued behind a held execution; its 100 ms pass with the gate still closed.
        error = expect_error(
            lambda: client.infer("reject", _inputs(), request_id="r2"), "UNAVAILABLE"
        )
        assert error.message() == "Request timeout expired"  # no request-id prefix in Triton
        assert calls.results.empty()  # the running request is still held
        models["reject"].open_gate()
        assert calls.next()[0] == "running"


def test_any_preferred_size_goes_without_waiting_the_queue_delay(
    server: ServerProcess, models: dict
) -> None:
    with grpcclient.InferenceServerClient(server.url) as client:
        calls = Calls(client)
        calls.send("preferred", "first", batch=3)  # no preferred size: waits 600 s
        models["preferred"].open_gate()
        calls.send("preferred", "second", batch=3)  # 3 + 3 = 6, the largest preferred size
        assert {calls.next()[0], calls.next()[0]} == {"first", "second"}
        calls.send("preferred", "pair", batch=2)  # a preferred size on its own
        assert calls.next()[0] == "pair"
        stats = client.get_inference_statistics("preferred").model_stats[0]
        batches = {b.batch_size: b.compute_infer.count for b in stats.batch_stats}
        assert batches == {6: 1, 2: 1}
        config = client.get_model_config("preferred").config
        assert list(config.dynamic_batching.preferred_batch_size) == [2, 6]


def test_huge_priority_levels_load_and_a_higher_priority_jumps_the_queue(
    server: ServerProcess, models: dict
) -> None:
    with grpcclient.InferenceServerClient(server.url) as client:
        calls = Calls(client)
        calls.send("levels", "default", batch=2)  # max_batch_size 2: goes at once, held
        models["levels"].wait_started()
        calls.send("levels", "low", priority=MAX_U64)
        wait_pending(server, "levels", 2)
        calls.send("levels", "late-default")
        wait_pending(server, "levels", 3)
        calls.send("levels", "urgent", priority=1)
        wait_pending(server, "levels", 4)
        models["levels"].open_gate()
        order = [calls.next()[0] for _ in range(4)]
        # Level 1 first, then the default level (2**32), then the lowest: "urgent" and
        # "late-default" fill the next batch of 2; "low" goes last.
        assert order[0] == "default"
        assert set(order[1:3]) == {"urgent", "late-default"} and order[3] == "low"
        stats = client.get_inference_statistics("levels").model_stats[0]
        assert {b.batch_size: b.compute_infer.count for b in stats.batch_stats} == {2: 2, 1: 1}
