"""Ragged batching end to end (issue 28, item 7), through tritonclient.

ONNX models shaped like qa/common/gen_qa_ragged_models.py's: requests with different
shapes of an ``allow_ragged_batch`` input share one batch, the model gets that input flat
plus the ``batch_input`` tensors the server computes, and a ``batch_output`` is scattered
back by each request's input shape. Once with instances in the engine's threads, once in
worker processes (the split layout with ``SERVICE_INSTANCE_WORKERS=1``, decision 030):
both run the same batch steps.
"""

from __future__ import annotations

import queue
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import models
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from onnx import TensorProto, helper
from proc_info import cmdline, process_tree
from server_process import ServerProcess

WIDTHS = [2, 4, 1, 3]  # qa/L0_batch_input's four requests
BATCHING = "dynamic_batching { max_queue_delay_microseconds: 2000000 }"


def _ragged_counts_model() -> Any:
    """gen_qa_ragged_models.py's onnx_batch_input graph: every output has a row per request
    (BATCH_AND_SIZE_INPUT / itself gives the row count) holding one input in full."""
    names = ("RAGGED", "BATCH_AND_SIZE", "BATCH")
    inputs = [helper.make_tensor_value_info(f"{n}_INPUT", TensorProto.FLOAT, [None]) for n in names]
    outputs = [
        helper.make_tensor_value_info(f"{n}_OUTPUT", TensorProto.FLOAT, [None, None]) for n in names
    ]
    shape = helper.make_tensor("shape_value", TensorProto.INT64, [2], [1, -1])
    column = helper.make_tensor("column_value", TensorProto.INT64, [2], [-1, 1])
    nodes = [
        helper.make_node("Constant", [], ["shape"], value=shape),
        helper.make_node("Constant", [], ["column"], value=column),
        helper.make_node("Div", ["BATCH_AND_SIZE_INPUT", "BATCH_AND_SIZE_INPUT"], ["ones"]),
        helper.make_node("Reshape", ["ones", "column"], ["expander"]),
    ]
    for n in names:
        nodes.append(helper.make_node("Reshape", [f"{n}_INPUT", "shape"], [f"{n}_row"]))
        nodes.append(helper.make_node("MatMul", ["expander", f"{n}_row"], [f"{n}_OUTPUT"]))
    return models.make_model(helper.make_graph(nodes, "ragged_counts", inputs, outputs))


def _item_shape_model() -> Any:
    """onnx_batch_item: BATCH_OUTPUT = BATCH_INPUT (the item shapes); INT32 here."""
    inputs = [
        helper.make_tensor_value_info("RAGGED_INPUT", TensorProto.FLOAT, [None]),
        helper.make_tensor_value_info("BATCH_INPUT", TensorProto.INT32, [None, 2]),
    ]
    out = helper.make_tensor_value_info("BATCH_OUTPUT", TensorProto.INT32, [None, None])
    node = helper.make_node("Identity", ["BATCH_INPUT"], ["BATCH_OUTPUT"])
    return models.make_model(helper.make_graph([node], "item_shape", inputs, [out]))


def _config(name: str, body: str) -> str:
    return f'name: "{name}"\nbackend: "onnxruntime"\nmax_batch_size: 4\n{body}'


RAGGED_INPUT = """
input { name: "RAGGED_INPUT" data_type: TYPE_FP32 dims: [-1] allow_ragged_batch: true }
"""
COUNTS = (
    RAGGED_INPUT
    + """
output { name: "RAGGED_OUTPUT" data_type: TYPE_FP32 dims: [-1] }
output { name: "BATCH_AND_SIZE_OUTPUT" data_type: TYPE_FP32 dims: [-1] }
output { name: "BATCH_OUTPUT" data_type: TYPE_FP32 dims: [-1] }
batch_input { kind: BATCH_ELEMENT_COUNT target_name: "BATCH_AND_SIZE_INPUT"
              data_type: TYPE_FP32 source_input: "RAGGED_INPUT" }
batch_input { kind: BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO target_name: "BATCH_INPUT"
              data_type: TYPE_FP32 source_input: "RAGGED_INPUT" }
"""
)


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("ragged_repo")
    counts = _ragged_counts_model()
    models.write_model(root, "counts", counts, _config("counts", COUNTS + BATCHING))
    models.write_model(
        root,
        "scatter",
        models.identity_model("FP32", [None]),
        _config(
            "scatter",
            'input { name: "INPUT0" data_type: TYPE_FP32 dims: [-1] allow_ragged_batch: true }\n'
            'output { name: "OUTPUT0" data_type: TYPE_FP32 dims: [-1] }\n'
            'batch_output { target_name: "OUTPUT0" kind: BATCH_SCATTER_WITH_INPUT_SHAPE '
            'source_input: "INPUT0" }\n' + BATCHING,
        ),
    )
    models.write_model(  # no dynamic batching: the default scheduler's one-request batches
        root,
        "item_shape",
        _item_shape_model(),
        _config(
            "item_shape",
            RAGGED_INPUT.replace("[-1]", "[-1, -1]")
            + 'output { name: "BATCH_OUTPUT" data_type: TYPE_INT32 dims: [2] }\n'
            'batch_input { kind: BATCH_ITEM_SHAPE target_name: "BATCH_INPUT" '
            'data_type: TYPE_INT32 source_input: "RAGGED_INPUT" }\n',
        ),
    )
    models.write_model(
        root,
        "bad_source",
        counts,
        _config(
            "bad_source", COUNTS.replace('source_input: "RAGGED_INPUT" }', 'source_input: "X" }', 1)
        ),
    )
    models.write_model(
        root,
        "bad_rank",
        models.identity_model("FP32", [None, None]),
        _config(
            "bad_rank",
            'input { name: "INPUT0" data_type: TYPE_FP32 dims: [-1] allow_ragged_batch: true }\n'
            'output { name: "OUTPUT0" data_type: TYPE_FP32 dims: [-1] }\n',
        ),
    )
    return root


@pytest.fixture(scope="module", params=["threads", "workers"])
def server(request: pytest.FixtureRequest, repo: Path) -> Iterator[ServerProcess]:
    args = ["--exit-on-error=false"]
    env = None
    if request.param == "workers":  # the split layout, each instance in a worker process
        args += ["--frontends", "1"]
        env = {"SERVICE_INSTANCE_WORKERS": "1"}
    proc = ServerProcess([repo], extra_args=args, env=env).start()
    if request.param == "workers":
        assert "service.backends.isolated.host" in _process_lines(proc), proc.log
    yield proc
    assert proc.stop() == 0, proc.log


def _process_lines(server: ServerProcess) -> str:
    """The command lines of the server's process tree."""
    tree = process_tree(server.pid)
    return "\n".join(cmdline(pid) for pid in tree)


def _stream(url: str, model: str, name: str, arrays: list[np.ndarray], output: str) -> list[Any]:
    """Send every array on one stream (so they queue together); the answers in the
    order sent. A stream answers in completion order, and a model of several instances
    (ONNX Runtime's default on the CPU: two) may finish a later request first, so each
    answer is put back in its place by its request id."""
    client = grpcclient.InferenceServerClient(url)
    answers: queue.Queue[Any] = queue.Queue()

    def callback(sink: queue.Queue[Any], result: Any, error: Any) -> None:
        sink.put(error if error is not None else result)

    client.start_stream(callback=partial(callback, answers))
    try:
        for index, array in enumerate(arrays):
            tensor = grpcclient.InferInput(name, list(array.shape), "FP32")
            tensor.set_data_from_numpy(array)
            client.async_stream_infer(
                model,
                [tensor],
                outputs=[grpcclient.InferRequestedOutput(output)],
                request_id=str(index),
            )
        results = [answers.get(timeout=30) for _ in arrays]
    finally:
        client.stop_stream()
        client.close()
    for result in results:
        assert not isinstance(result, Exception), result
    results.sort(key=lambda r: int(r.get_response().id))
    return [r.as_numpy(output) for r in results]


def _qa_inputs() -> list[np.ndarray]:
    return [np.full((1, w), w, np.float32) for w in WIDTHS]


def test_batch_inputs_count_the_ragged_elements(server: ServerProcess) -> None:
    counts = _stream(server.url, "counts", "RAGGED_INPUT", _qa_inputs(), "BATCH_AND_SIZE_OUTPUT")
    # One batch of the four: every request sees the whole batch's element counts.
    assert [c.tolist() for c in counts] == [[[2, 4, 1, 3]]] * 4
    offsets = _stream(server.url, "counts", "RAGGED_INPUT", _qa_inputs(), "BATCH_OUTPUT")
    assert [o.tolist() for o in offsets] == [[[0, 2, 6, 7, 10]]] * 4


def test_the_model_gets_ragged_inputs_flat(server: ServerProcess) -> None:
    flat = _stream(server.url, "counts", "RAGGED_INPUT", _qa_inputs(), "RAGGED_OUTPUT")
    expected = [float(w) for w in WIDTHS for _ in range(w)]
    assert [f.tolist() for f in flat] == [[expected]] * 4


def test_batch_outputs_are_scattered_by_input_shape(server: ServerProcess) -> None:
    outputs = _stream(server.url, "scatter", "INPUT0", _qa_inputs(), "OUTPUT0")
    assert [o.tolist() for o in outputs] == [[[float(w)] * w] for w in WIDTHS]


def test_item_shapes_in_the_configured_datatype(server: ServerProcess) -> None:
    arrays = [np.zeros(s, np.float32) for s in ([2, 1, 2], [1, 2, 2])]
    shapes = _stream(server.url, "item_shape", "RAGGED_INPUT", arrays, "BATCH_OUTPUT")
    assert shapes[0].dtype == np.int32
    assert [s.tolist() for s in shapes] == [[[1, 2], [1, 2]], [[2, 2]]]


def test_bad_batch_io_refuses_the_load_with_tritons_texts(server: ServerProcess) -> None:
    client = grpcclient.InferenceServerClient(server.url)
    try:
        index = {m.name: m for m in client.get_model_repository_index().models}
    finally:
        client.close()
    assert index["bad_source"].state == "UNAVAILABLE"
    assert "unknown source input name 'X' for bad_source" in index["bad_source"].reason
    assert index["bad_rank"].state == "UNAVAILABLE"
    assert (
        "configuration expects model provides input with shape [-1]  for ragged input "
        "'INPUT0', model provides [-1,-1]" in index["bad_rank"].reason
    )
