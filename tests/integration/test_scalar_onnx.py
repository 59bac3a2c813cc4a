"""ONNX models with scalar inputs and outputs, served under config dims of 1s, as Triton's
ONNX Runtime backend serves them (qa/L0_scalar_io; its test.sh's last step is
test_a_scalar_with_a_dim_other_than_1_fails_the_start here).

Two kinds of "scalar": a value declared with shape ``[]`` (rank 0: ONNX Runtime refuses
a ``[1]`` tensor for it, so the server must feed a rank-0 one) and a value with no shape
at all (what qa's gen_qa_ort_scalar_models.py writes). Either way the model sees a
rank-0 value (the RANK output says so), and its results come back in the config's shape.
"""

from __future__ import annotations

from pathlib import Path

import models
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from integration_support import running_server
from onnx import TensorProto, helper
from server_process import ServerProcess


def _doubling_model(shape: list[int] | None) -> bytes:
    """OUTPUT = INPUT + INPUT, both FP32 with ``shape`` (None: no shape at all), and
    RANK = the rank of the INPUT the model got (INT64, a scalar)."""
    graph = helper.make_graph(
        [
            helper.make_node("Add", ["INPUT", "INPUT"], ["OUTPUT"]),
            helper.make_node("Shape", ["INPUT"], ["SHAPE"]),
            helper.make_node("Size", ["SHAPE"], ["RANK"]),
        ],
        "doubling",
        [helper.make_tensor_value_info("INPUT", TensorProto.FLOAT, shape)],
        [
            helper.make_tensor_value_info("OUTPUT", TensorProto.FLOAT, shape),
            helper.make_tensor_value_info("RANK", TensorProto.INT64, shape),
        ],
    )
    if shape is not None:
        return models.make_model(graph).SerializeToString()
    # onnx's full check wants every graph input shaped; qa's generator skips the check.
    opsets = [helper.make_opsetid("", models.DEFAULT_OPSET)]
    version = helper.find_min_ir_version_for(opsets)
    return helper.make_model(graph, opset_imports=opsets, ir_version=version).SerializeToString()


def _write(repo: Path, name: str, shape: list[int] | None, dims: list[int]) -> None:
    io = [("INPUT", "FP32", dims)], [("OUTPUT", "FP32", dims), ("RANK", "INT64", dims)]
    models.write_model(repo, name, _doubling_model(shape), models.make_config(name, *io))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> ServerProcess:
    repo = tmp_path_factory.mktemp("scalar_repo")
    _write(repo, "rank0_1dim", [], [1])
    _write(repo, "rank0_2dim", [], [1, 1])
    _write(repo, "unranked_1dim", None, [1])
    _write(repo, "unranked_2dim", None, [1, 1])
    with running_server([repo]) as s:
        yield s


@pytest.mark.parametrize(
    ("model", "shape"),
    [
        ("rank0_1dim", [1]),
        ("rank0_2dim", [1, 1]),
        ("unranked_1dim", [1]),
        ("unranked_2dim", [1, 1]),
    ],
)
def test_a_scalar_serves_in_the_configs_shape(
    server: ServerProcess, model: str, shape: list[int]
) -> None:
    with grpcclient.InferenceServerClient(server.url) as client:
        metadata = client.get_model_metadata(model)
        assert [list(t.shape) for t in (*metadata.inputs, *metadata.outputs)] == [shape] * 3
        value = np.full(shape, 2.5, dtype=np.float32)
        tensor = grpcclient.InferInput("INPUT", shape, "FP32")
        tensor.set_data_from_numpy(value)
        result = client.infer(model, [tensor])
        output = result.as_numpy("OUTPUT")
        assert output.shape == tuple(shape)
        np.testing.assert_array_equal(output, value * 2)
        rank = result.as_numpy("RANK")
        assert rank.shape == tuple(shape)
        np.testing.assert_array_equal(rank, np.zeros(shape, np.int64))


def test_a_scalar_with_a_dim_other_than_1_fails_the_start(tmp_path: Path) -> None:
    """test.sh: ``dims: [2]`` for a scalar is refused, in Triton's words, and the
    server does not start (--exit-on-error is on by default)."""
    _write(tmp_path, "scalar_bad", None, [2])
    with pytest.raises(RuntimeError) as info:
        ServerProcess([tmp_path]).start()
    text = str(info.value)
    assert "exited with 1" in text, text
    assert (
        "unable to load model 'scalar_bad', scalar tensor 'INPUT', should only provide 1 in "
        "the model configuration when the model doesn't support batching. Model "
        "configuration provided: [2]." in text
    ), text
