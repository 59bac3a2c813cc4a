"""BLS (``pb_utils.InferenceRequest(...).exec()``), end to end: a real server, tritonclient.

The probe model (tests/python_models/bls/bls_probe) makes one BLS call per CASE and
answers what it got; ``triton_2.51.json`` beside it holds the real Triton 2.51's answers
to the same cases on the same repository (recorded with ``start_reference.sh``): results,
requested-output subsets, the error texts of the core's refusals and of the BLS rules,
a called model's own error, decoupled iterators (the last response final, possibly
empty), parameters and flags as the called model sees them, the constructor's checks,
and 1.2 MB tensors both ways. ``async_exec`` requests from an ``async def execute`` go
through the called model's dynamic batcher: on Triton 8 requests ran in 2 executions.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import models
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from integration_support import running_server
from server_process import REPO_ROOT, ServerProcess
from tritonclient.utils import InferenceServerException

BLS_MODELS = REPO_ROOT / "tests" / "python_models" / "bls"
TRITON_ANSWERS = json.loads((BLS_MODELS / "triton_2.51.json").read_text())
BATCHED = "dynamic_batching { preferred_batch_size: [ 8 ] max_queue_delay_microseconds: 2000000 }\n"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("bls")
    for model in BLS_MODELS.iterdir():
        if model.is_dir():
            shutil.copytree(model, repo / model.name)
    io = ([("INPUT0", "FP32", [4]), ("INPUT1", "FP32", [4])],)
    io += ([("OUTPUT0", "FP32", [4]), ("OUTPUT1", "FP32", [4])],)
    config = models.make_config("bls_batched", *io, max_batch_size=8, extra=BATCHED)
    models.write_model(Path(repo), "bls_batched", models.add_sub_model(), config)
    args = ["--model-control-mode", "explicit"]
    for model in sorted(p.name for p in repo.iterdir() if p.name != "bls_init_bls"):
        args += ["--load-model", model]
    with running_server([Path(repo)], args) as proc:
        yield proc


@pytest.fixture(scope="module")
def client(server: ServerProcess) -> Iterator[grpcclient.InferenceServerClient]:
    with grpcclient.InferenceServerClient(server.url) as c:
        yield c


def _probe(client: grpcclient.InferenceServerClient, case: int) -> object:
    tensor = grpcclient.InferInput("CASE", [1], "INT32")
    tensor.set_data_from_numpy(np.array([case], np.int32))
    return json.loads(client.infer("bls_probe", [tensor]).as_numpy("TEXT")[0].decode())


@pytest.mark.parametrize("case", sorted(TRITON_ANSWERS, key=int))
def test_each_bls_call_answers_as_triton_does(
    client: grpcclient.InferenceServerClient, case: str
) -> None:
    assert _probe(client, int(case)) == TRITON_ANSWERS[case]


def test_bls_requests_count_in_the_called_models_statistics(
    client: grpcclient.InferenceServerClient,
) -> None:
    """Two more successful calls to bls_pyadd, two refused ones that never ran."""
    before = client.get_inference_statistics("bls_pyadd", as_json=True)["model_stats"][0]
    for case in (1, 8, 4, 11):
        _probe(client, case)
    after = client.get_inference_statistics("bls_pyadd", as_json=True)["model_stats"][0]
    ran = int(after.get("inference_count", 0)) - int(before.get("inference_count", 0))
    succeeded = int(after["inference_stats"]["success"].get("count", 0)) - int(
        before["inference_stats"]["success"].get("count", 0)
    )
    assert (ran, succeeded) == (2, 2)
    assert "count" not in after["inference_stats"]["fail"]


def test_async_exec_requests_are_batched_by_the_called_models_scheduler(
    client: grpcclient.InferenceServerClient,
) -> None:
    tensor = grpcclient.InferInput("N", [1], "INT32")
    tensor.set_data_from_numpy(np.array([8], np.int32))
    sums = client.infer("bls_async", [tensor]).as_numpy("SUMS").tolist()
    assert sums == [8.0 * i for i in range(8)]
    stats = client.get_inference_statistics("bls_batched", as_json=True)["model_stats"][0]
    assert int(stats["inference_count"]) == 8
    assert int(stats["execution_count"]) < 8


def test_bls_in_initialize_fails_the_load(
    server: ServerProcess, client: grpcclient.InferenceServerClient
) -> None:
    """Triton allows BLS only in execute; the model's load fails with its text."""
    with pytest.raises(InferenceServerException) as caught:
        client.load_model("bls_init_bls")
    assert "BLS is only supported during the 'execute' function." in str(caught.value)
    assert "BLS is only supported during the 'execute' function." in server.log
