"""Ensembles with optional inputs end to end (issue 39 item 3; Triton's
qa/L0_optional_input optional_connecting_tensor, checked there on the reference).

Two steps of a Python model that answers only the optional inputs it got, chained by
ensemble tensors: a request that omits an input leaves that tensor unproduced, and the
second step runs with the tensors that exist. Every request is answered within the
client's deadline: an unanswered one fails the test as DEADLINE_EXCEEDED.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from integration_support import running_server
from server_process import ServerProcess
from tritonclient.utils import InferenceServerException

TIMEOUT_S = 30.0

OPTIONAL_IDENTITY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            outputs = []
            for index in ("0", "1"):
                tensor = pb_utils.get_input_tensor_by_name(request, "INPUT" + index)
                if tensor is not None:
                    outputs.append(pb_utils.Tensor("OUTPUT" + index, tensor.as_numpy()))
            responses.append(pb_utils.InferenceResponse(outputs))
        return responses
"""

_IO = """
max_batch_size: 4
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 1 ] optional: true }},
        {{ name: "INPUT1" data_type: TYPE_FP32 dims: [ 1 ] optional: true }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 1 ] }},
         {{ name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 1 ] }} ]
{extra}
"""


def _step(inputs: tuple[str, str], outputs: tuple[str, str]) -> str:
    return (
        '{ model_name: "optional_identity" model_version: -1 '
        f'input_map {{ key: "INPUT0" value: "{inputs[0]}" }} '
        f'input_map {{ key: "INPUT1" value: "{inputs[1]}" }} '
        f'output_map {{ key: "OUTPUT0" value: "{outputs[0]}" }} '
        f'output_map {{ key: "OUTPUT1" value: "{outputs[1]}" }} }}'
    )


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = Path(tmp_path_factory.mktemp("optional_repo"))
    model = repo / "optional_identity"
    (model / "1").mkdir(parents=True)
    (model / "1" / "model.py").write_text(OPTIONAL_IDENTITY)
    (model / "config.pbtxt").write_text(
        'name: "optional_identity" backend: "python"' + _IO.format(extra="")
    )
    steps = ", ".join(
        [
            _step(("INPUT0", "INPUT1"), ("mid0", "mid1")),
            _step(("mid0", "mid1"), ("OUTPUT0", "OUTPUT1")),
        ]
    )
    ensemble = repo / "connecting"
    (ensemble / "1").mkdir(parents=True)
    (ensemble / "config.pbtxt").write_text(
        'name: "connecting" platform: "ensemble"'
        + _IO.format(extra=f"ensemble_scheduling {{ step [ {steps} ] }}")
    )
    with running_server([repo]) as proc:
        yield proc


@pytest.fixture(scope="module")
def client(server: ServerProcess) -> Iterator[grpcclient.InferenceServerClient]:
    with grpcclient.InferenceServerClient(server.url) as c:
        yield c


def _infer(
    client: grpcclient.InferenceServerClient, values: dict[str, float]
) -> grpcclient.InferResult:
    inputs = []
    for name, value in values.items():
        tensor = grpcclient.InferInput(name, [1, 1], "FP32")
        tensor.set_data_from_numpy(np.full((1, 1), value, np.float32))
        inputs.append(tensor)
    return client.infer("connecting", inputs, client_timeout=TIMEOUT_S)


@pytest.mark.parametrize(
    "values", [{"INPUT0": 1.0, "INPUT1": 2.0}, {"INPUT0": 1.0}, {"INPUT1": 2.0}]
)
def test_each_step_runs_with_the_tensors_that_exist(
    client: grpcclient.InferenceServerClient, values: dict[str, float]
) -> None:
    result = _infer(client, values)
    for index in ("0", "1"):
        output = result.as_numpy(f"OUTPUT{index}")
        if f"INPUT{index}" in values:
            assert output is not None and output.tolist() == [[values[f"INPUT{index}"]]]
        else:  # never produced: absent from the answer, not awaited
            assert output is None


def test_a_request_without_any_input_is_answered(
    client: grpcclient.InferenceServerClient,
) -> None:
    """Nothing to pass on: the steps run without inputs and the ensemble answers with no
    outputs (an error would do too; only silence fails)."""
    try:
        result = _infer(client, {})
    except InferenceServerException as exc:
        assert exc.status() != "StatusCode.DEADLINE_EXCEEDED", exc
    else:
        assert result.as_numpy("OUTPUT0") is None and result.as_numpy("OUTPUT1") is None
