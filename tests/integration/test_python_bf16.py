"""BF16 in Python models: ``as_numpy()`` gives ml_dtypes.bfloat16 (numpy has no bfloat16),
a bfloat16 array goes out as BF16, and BLS carries BF16 both ways. (Triton 2.51's
python backend refuses ``as_numpy()`` on BF16 and offers DLPack only; a model written
for it still works here: ``to_dlpack()`` gives a bfloat16 capsule, unit-tested in
tests/unit/test_python_dlpack.py.)"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from integration_support import running_server
from server_process import ServerProcess

DOUBLE = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            kind = np.array([str(x.dtype).encode()], np.object_)
            responses.append(
                pb_utils.InferenceResponse(
                    [pb_utils.Tensor("Y", x * 2), pb_utils.Tensor("KIND", kind)]
                )
            )
        return responses
"""

VIA_BLS = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X")
            called = pb_utils.InferenceRequest(
                model_name="bf16_double", inputs=[x], requested_output_names=["Y", "KIND"]
            ).exec()
            if called.has_error():
                raise pb_utils.TritonModelException(called.error().message())
            responses.append(pb_utils.InferenceResponse(called.output_tensors()))
        return responses
"""

CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: 0
input [ {{ name: "X" data_type: TYPE_BF16 dims: [ 4 ] }} ]
output [
  {{ name: "Y" data_type: TYPE_BF16 dims: [ 4 ] }},
  {{ name: "KIND" data_type: TYPE_STRING dims: [ 1 ] }}
]
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = Path(tmp_path_factory.mktemp("bf16"))
    for name, source in (("bf16_double", DOUBLE), ("bf16_via_bls", VIA_BLS)):
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "1" / "model.py").write_text(source)
        (repo / name / "config.pbtxt").write_text(CONFIG.format(name=name))
    with running_server([repo]) as proc:
        yield proc


@pytest.mark.parametrize("model", ["bf16_double", "bf16_via_bls"])
def test_bf16_is_bfloat16_inside_the_model(server: ServerProcess, model: str) -> None:
    values = np.array([1.0, -2.5, 0.15625, 3.0], dtype=ml_dtypes.bfloat16)
    tensor = grpcclient.InferInput("X", [4], "BF16")
    tensor.set_data_from_numpy(values)
    with grpcclient.InferenceServerClient(server.url) as client:
        result = client.infer(model, [tensor])
    assert result.as_numpy("KIND").tolist() == [b"bfloat16"]
    outputs = {o.name: o.datatype for o in result.get_response().outputs}
    assert outputs["Y"] == "BF16"
    np.testing.assert_array_equal(result.as_numpy("Y"), values * 2)
