"""The dynamic batcher's refusals over HTTP: 503 with Triton's text, as Triton's HTTP frontend.

A full queue level and a request whose queue timeout expired are UNAVAILABLE in Triton's
core, which its HTTP frontend answers with 503 and ``{"error": ...}``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import running_gateway
from gated_model import GatedModel, wait_pending, write_gated_model
from gateway_process import GatewayProcess, Reply, http_request
from server_process import ServerProcess


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("gateway_batcher")


@pytest.fixture(scope="module")
def models(repo: Path) -> dict[str, GatedModel]:
    return {
        "full": write_gated_model(
            repo, "full", "preferred_batch_size: [ 8 ] default_queue_policy { max_queue_size: 1 }"
        ),
        "reject": write_gated_model(
            repo, "reject", "default_queue_policy { default_timeout_microseconds: 100000 }"
        ),
    }


@pytest.fixture(scope="module")
def server(repo: Path, models: dict[str, GatedModel]) -> Iterator[ServerProcess]:
    proc = ServerProcess([repo]).start()
    yield proc
    assert proc.stop() == 0, proc.log


@pytest.fixture(scope="module")
def gateway(server: ServerProcess) -> Iterator[GatewayProcess]:
    with running_gateway(server.url) as gw:
        yield gw


def _infer(gw: GatewayProcess, model: str, batch: int = 1, **extra: Any) -> Reply:
    body = {
        "inputs": [
            {"name": "INPUT0", "shape": [batch, 4], "datatype": "FP32", "data": [0.5] * 4 * batch}
        ],
        **extra,
    }
    return http_request(gw.url, "POST", f"/v2/models/{model}/infer", body)


def _in_background(gw: GatewayProcess, model: str, batch: int = 1) -> tuple[threading.Thread, list]:
    replies: list[Reply] = []
    thread = threading.Thread(target=lambda: replies.append(_infer(gw, model, batch)))
    thread.start()
    return thread, replies


def test_a_full_queue_is_503_with_tritons_text(
    server: ServerProcess, gateway: GatewayProcess, models: dict[str, GatedModel]
) -> None:
    running, first = _in_background(gateway, "full", batch=8)
    models["full"].wait_started()
    queued, second = _in_background(gateway, "full")
    wait_pending(server, "full", 2)  # the queued request holds the only place
    reply = _infer(gateway, "full", id="r1")
    assert reply.status == 503
    assert reply.error == "[request id: r1] Exceeds maximum queue size"
    models["full"].open_gate()
    running.join(30)
    queued.join(30)
    assert [r.status for r in first + second] == [200, 200]


def test_a_queue_timeout_is_503_request_timeout_expired(
    gateway: GatewayProcess, models: dict[str, GatedModel]
) -> None:
    running, first = _in_background(gateway, "reject")
    models["reject"].wait_started()
    reply = _infer(gateway, "reject", id="r3")
    assert reply.status == 503
    assert reply.error == "Request timeout expired"  # Triton adds no request-id prefix here
    models["reject"].open_gate()
    running.join(30)
    assert [r.status for r in first] == [200]
