"""``pb_utils.load_model``, ``unload_model``, ``is_model_ready`` from a Python model.

The probe model (tests/python_models/model_control/ctl_probe) runs one kind of call per
CASE, in order; the flow follows Triton's qa ``bls_model_loading`` (load, a config
override with a version policy, a failed load that changes nothing, files without a
config refused, files with a config under another name, unload). The reference Triton
2.51 on this machine aborts in its python backend on any of these calls (a
boost::interprocess lock_exception), so the texts follow python_backend r24.10's
model_loader.cc: its prefixes ("Failed to load model: ", ...) before the server's own
answer to the same repository request.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from integration_support import running_server
from server_process import REPO_ROOT, ServerProcess

MODELS = REPO_ROOT / "tests" / "python_models" / "model_control"
TARGET = "ctl_target"

# case -> what the probe answers (cases run in this order: each builds on the last).
EXPECTED: list[tuple[int, object]] = [
    (1, [False, True, True, True, False]),  # all versions of ctl_target load
    (2, [True]),  # unloaded
    (
        3,
        [
            "TritonModelException",
            "Failed to load model: failed to load 'ctl_nope', failed to poll from model repository",
        ],
    ),
    (4, [True, False, True]),  # a config override: only version 1
    (
        5,
        [
            "TritonModelException",
            "Failed to load model: failed to load 'ctl_target': "
            "parameter 'config' is not a valid ModelConfig: Failed to load JSON: Expecting "
            "value: line 1 column 1 (char 0).",
        ],
    ),
    (
        6,
        [
            [
                "TritonModelException",
                "Failed to check model readiness: failed to get model "
                "version from specified version string 'abc' (details: stol), version should be "
                "an integral value > 0",
            ],
            [
                "TritonModelException",
                "Failed to check model readiness: failed to get model "
                "version from specified version string '-1', version should be an integral "
                "value > 0",
            ],
            False,
        ],
    ),
    (
        7,
        [
            "TritonModelException",
            "Failed to load model: failed to load 'ctl_target': the "
            "'config' parameter must be provided with 'file:' parameters, to serve as the "
            "model configuration",
        ],
    ),
    (8, [True, True, False]),  # a new model from files and a config
    (
        9,
        [
            "TritonModelException",
            "failed to load model 'ctl_target', files should be a "
            "dictionary of file paths and file contents",
        ],
    ),
    (
        10,
        [
            "TritonModelException",
            "Failed to unload model: failed to unload 'ctl_nope': no model 'ctl_nope' is known",
        ],
    ),
    (11, [True, True]),  # both unloaded
]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("model_control")
    shutil.copytree(MODELS, repo, dirs_exist_ok=True)
    args = ["--model-control-mode", "explicit", "--load-model", "ctl_probe"]
    with running_server([repo], args) as proc:
        yield proc


def test_model_control_calls_answer_in_order(server: ServerProcess) -> None:
    with grpcclient.InferenceServerClient(server.url) as client:
        for case, expected in EXPECTED:
            tensor = grpcclient.InferInput("CASE", [1], "INT32")
            tensor.set_data_from_numpy(np.array([case], np.int32))
            text = client.infer("ctl_probe", [tensor]).as_numpy("TEXT")[0].decode()
            assert json.loads(text) == expected, f"case {case}"
        assert not client.is_model_ready(TARGET)


def test_a_model_may_load_another_from_initialize(server: ServerProcess) -> None:
    """Unlike BLS, model control is allowed in ``initialize`` (Triton's stub sets no
    phase rule for it)."""
    with grpcclient.InferenceServerClient(server.url) as client:
        client.load_model("ctl_init")
        assert client.is_model_ready("ctl_init")
        assert client.is_model_ready(TARGET)
        client.unload_model("ctl_init")
        client.unload_model(TARGET)
