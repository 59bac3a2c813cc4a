"""The model config clients read back, over gRPC and REST, is the one Triton 2.51 reports.

``triton_configs/models`` holds Python-backend models with configs that exercise what
Triton's core fills in (NormalizeModelConfig: version policy, pinned memory, batcher
defaults; instance groups; an ensemble's transaction policy; the backend's auto-complete)
and what its REST JSON looks like (64-bit fields, one-field messages). The expected
answers in ``triton_configs/triton_2.51.json`` are what the real Triton 2.51 (CPU, python
backend) answered for the same repository to tritonclient's ``get_model_config``: gRPC
with ``as_json=True`` (its ``config``), REST as parsed JSON.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from conftest import running_gateway
from gateway_process import GatewayProcess
from server_process import ServerProcess

HERE = Path(__file__).parent / "triton_configs"
EXPECTED: dict[str, dict[str, Any]] = json.loads((HERE / "triton_2.51.json").read_text())


def _repository(root: Path) -> Path:
    """The models with a version folder each; those without a model file of their own
    run the identity model."""
    repo = root / "models"
    shutil.copytree(HERE / "models", repo)
    for model in repo.iterdir():
        version = model / "1"
        version.mkdir()
        own = model / "model.py"
        if own.exists():
            own.rename(version / "model.py")
        else:
            shutil.copy(HERE / "identity.py", version / "model.py")
    return repo


@pytest.fixture(scope="module")
def servers(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[ServerProcess, GatewayProcess]]:
    repo = _repository(tmp_path_factory.mktemp("reported_configs"))
    service = ServerProcess([repo]).start(timeout=240)  # 14 models, 20 Python workers
    try:
        with running_gateway(service.url) as gateway:
            yield service, gateway
    finally:
        service.stop()


def test_every_expected_model_is_in_the_repository() -> None:
    assert sorted(EXPECTED) == sorted(p.name for p in (HERE / "models").iterdir())


@pytest.mark.parametrize("model", sorted(EXPECTED))
def test_grpc_config_is_tritons(servers: tuple[ServerProcess, GatewayProcess], model: str) -> None:
    service, _ = servers
    with grpcclient.InferenceServerClient(service.url) as client:
        assert client.is_model_ready(model), service.log
        reported = client.get_model_config(model, as_json=True)["config"]
    assert reported == EXPECTED[model]["grpc"]


@pytest.mark.parametrize("model", sorted(EXPECTED))
def test_rest_config_is_tritons(servers: tuple[ServerProcess, GatewayProcess], model: str) -> None:
    _, gateway = servers
    client = httpclient.InferenceServerClient(gateway.url)
    try:
        reported = client.get_model_config(model)
    finally:
        client.close()
    assert reported == EXPECTED[model]["http"]
