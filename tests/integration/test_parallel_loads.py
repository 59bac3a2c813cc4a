"""Instances of one model, and different models, load in parallel (issue 27, item 8).

Each Python model here starts its ``initialize`` by leaving a marker and then waits for
the markers of its partners: loaded one after the other, the first one waits in vain and
fails its load; loaded in parallel, as Triton loads them (``--model-load-thread-count``,
default 4; a backend's instances at once), every one sees the others and the models are
ready.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import tritonclient.grpc as grpcclient
from integration_support import running_server

WAITING_MODEL = """
import json
import os
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        markers = config["parameters"]["markers"]["string_value"]
        partners = config["parameters"]["partners"]["string_value"].split(",")
        me = args["model_instance_name"]
        open(os.path.join(markers, me), "w").close()
        deadline = time.monotonic() + 20
        while not all(os.path.exists(os.path.join(markers, p)) for p in partners):
            if time.monotonic() > deadline:
                raise pb_utils.TritonModelException(f"{me}: partners never started loading")
            time.sleep(0.05)

    def execute(self, requests):
        responses = []
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", data)]))
        return responses
"""


def _model(root: Path, name: str, count: int, partners: list[str], markers: Path) -> None:
    (root / name / "1").mkdir(parents=True)
    (root / name / "1" / "model.py").write_text(WAITING_MODEL)
    (root / name / "config.pbtxt").write_text(
        f'name: "{name}"\nbackend: "python"\nmax_batch_size: 0\n'
        'input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
        'output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
        f"instance_group [ {{ count: {count} kind: KIND_CPU }} ]\n"
        f'parameters {{ key: "partners" value: {{ string_value: "{",".join(partners)}" }} }}\n'
        f'parameters {{ key: "markers" value: {{ string_value: "{markers}" }} }}\n'
    )


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    markers, root = tmp_path / "markers", tmp_path / "repository"
    markers.mkdir()
    _model(root, "pair", 2, ["pair_0_0", "pair_0_1"], markers)
    _model(root, "left", 1, ["left_0_0", "right_0_0"], markers)
    _model(root, "right", 1, ["left_0_0", "right_0_0"], markers)
    return root


def test_a_models_instances_load_in_parallel(repo: Path) -> None:
    args = ["--model-control-mode", "explicit"]
    with (
        running_server([repo], extra_args=args) as server,
        grpcclient.InferenceServerClient(server.url) as client,
    ):
        client.load_model("pair")  # raises when the two instances loaded in turn
        assert client.is_model_ready("pair")


def test_two_models_load_in_parallel(repo: Path) -> None:
    args = ["--model-control-mode", "explicit"]
    with running_server([repo], extra_args=args) as server:
        errors: list[BaseException] = []

        def load(name: str) -> None:
            try:
                with grpcclient.InferenceServerClient(server.url) as client:
                    client.load_model(name)
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=load, args=(n,)) for n in ("left", "right")]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert not errors, errors
        with grpcclient.InferenceServerClient(server.url) as client:
            assert client.is_model_ready("left") and client.is_model_ready("right")


def test_models_of_the_repository_load_in_parallel_at_start(repo: Path) -> None:
    with (
        running_server([repo]) as server,  # every model, loaded at start
        grpcclient.InferenceServerClient(server.url) as client,
    ):
        for name in ("pair", "left", "right"):
            assert client.is_model_ready(name)
