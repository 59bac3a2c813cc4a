"""Python models written for NumPy 1 (Triton 2.51's) serve out of the box (decision 051):
the worker restores the aliases NumPy 2 removed before it imports ``model.py``; a NumPy 1
function NumPy 2 dropped for good still fails the load with NumPy's own text."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from integration_support import running_server
from server_process import ServerProcess
from tritonclient.utils import InferenceServerException

# Every NumPy 1 name here raises AttributeError under NumPy 2: at import, in a default
# argument, in initialize and in execute.
MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils

SPECIALS = np.array([np.NaN, np.PINF, np.NINF, np.Inf, np.infty, np.NZERO], dtype=np.float_)


class TritonPythonModel:
    def initialize(self, args, kind=np.string_):
        self.kind = kind
        self.sums = np.cast[np.float32]

    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            total = self.sums([np.product(x), np.round_(np.sum(x), 1)])
            found = np.in1d(x, [2.0, 3.0])
            text = np.array([self.kind(b"np1"), np.unicode_("x").encode()], dtype=np.object_)
            responses.append(
                pb_utils.InferenceResponse(
                    [
                        pb_utils.Tensor("SPECIALS", SPECIALS.astype(np.float32)),
                        pb_utils.Tensor("TOTAL", total),
                        pb_utils.Tensor("FOUND", found),
                        pb_utils.Tensor("TEXT", text),
                    ]
                )
            )
        return responses
"""

GONE = """
import numpy as np


class TritonPythonModel:
    def initialize(self, args):
        np.find_common_type([np.float32], [])

    def execute(self, requests):
        return []
"""

CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: 0
input [ {{ name: "IN" data_type: TYPE_FP32 dims: [ -1 ] }} ]
output [
  {{ name: "SPECIALS" data_type: TYPE_FP32 dims: [ 6 ] }},
  {{ name: "TOTAL" data_type: TYPE_FP32 dims: [ 2 ] }},
  {{ name: "FOUND" data_type: TYPE_BOOL dims: [ -1 ] }},
  {{ name: "TEXT" data_type: TYPE_STRING dims: [ 2 ] }}
]
"""


def _model(repo: Path, name: str, source: str) -> None:
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "1" / "model.py").write_text(source)
    (repo / name / "config.pbtxt").write_text(CONFIG.format(name=name))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("numpy1")
    _model(repo, "numpy1", MODEL)
    _model(repo, "numpy1_gone", GONE)
    with running_server(
        [repo], ["--model-control-mode", "explicit", "--load-model", "numpy1"]
    ) as proc:
        yield proc


def test_a_numpy1_model_answers_over_grpc(server: ServerProcess) -> None:
    values = np.array([1.0, 2.0, 3.5], np.float32)
    tensor = grpcclient.InferInput("IN", [3], "FP32")
    tensor.set_data_from_numpy(values)
    with grpcclient.InferenceServerClient(server.url) as client:
        result = client.infer("numpy1", [tensor])
    specials = result.as_numpy("SPECIALS")
    expected = np.array([np.nan, np.inf, -np.inf, np.inf, np.inf, -0.0], np.float32)
    assert np.array_equal(specials, expected, equal_nan=True)
    assert np.signbit(specials[5])
    assert result.as_numpy("TOTAL").tolist() == [7.0, 6.5]
    assert result.as_numpy("FOUND").tolist() == [False, True, False]
    assert result.as_numpy("TEXT").tolist() == [b"np1", b"x"]


def test_a_numpy1_function_numpy2_dropped_fails_the_load_with_numpys_text(
    server: ServerProcess,
) -> None:
    client = grpcclient.InferenceServerClient(server.url)
    with client, pytest.raises(InferenceServerException) as caught:
        client.load_model("numpy1_gone")
    assert "`np.find_common_type` was removed in the NumPy 2.0 release." in caught.value.message()
