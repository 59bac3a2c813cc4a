"""Ensembles end to end through tritonclient: the step DAG, batching, sequences, validation.

The main pipeline (``pipeline``)::

    RAW --scale (x3)--> SCALED --square------------------> SQUARED
                          |  \\--add_sub(SCALED, RAW)---> PLUS (4x), MINUS (2x)
                          \\----------------------------> SCALED (also an output)

``square`` and ``add_sub`` both wait only on SCALED, so they run concurrently. That is
shown without timing (robust on a 2-vCPU machine) on a second server started with
TRITONSERVER_DELAY_SCHEDULER=4: there a dynamic batcher holds its first batch until four
requests are queued, and one request to ``fanout`` (four parallel steps calling one model)
only completes if all four steps were submitted before any of them finished.
"""

from __future__ import annotations

import asyncio
import queue
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as aioclient
import tritonclient.http as httpclient
from models import add_sub_model, make_config, make_model, write_model
from onnx import TensorProto, helper, numpy_helper
from replica_cluster import GatewayProcess
from server_process import ServerProcess
from tritonclient.utils import InferenceServerException

WIDTH = 4
BATCH_NOTE = (
    "NOTE: Setting a non-zero max_batch_size in the model config requires a batch dimension "
    "to be prepended to each input shape. If you want to specify the full shape including the "
    "batch dim in your input dims config, try setting max_batch_size to zero. See the model "
    "configuration docs for more info on max_batch_size."
)
TIMEOUT = 30.0  # client-side limit on every request: a hang becomes a failure, not a stall
PIPELINE_OUTPUTS = ("SQUARED", "PLUS", "MINUS", "SCALED")

# --------------------------------------------------------------------------- model builders


def _fp32_unary(name: str, op: str, constant: float | None) -> Any:
    """OUTPUT0 = op(INPUT0, constant) (or op(INPUT0, INPUT0)), FP32 [batch, WIDTH]."""
    initializers = []
    other = "INPUT0"
    if constant is not None:
        initializers.append(numpy_helper.from_array(np.array(constant, np.float32), "K"))
        other = "K"
    graph = helper.make_graph(
        [helper.make_node(op, ["INPUT0", other], ["OUTPUT0"])],
        name,
        [helper.make_tensor_value_info("INPUT0", TensorProto.FLOAT, ["batch", WIDTH])],
        [helper.make_tensor_value_info("OUTPUT0", TensorProto.FLOAT, ["batch", WIDTH])],
        initializer=initializers,
    )
    return make_model(graph)


def _int_double_model() -> Any:
    graph = helper.make_graph(
        [helper.make_node("Add", ["INPUT0", "INPUT0"], ["OUTPUT0"])],
        "int_double",
        [helper.make_tensor_value_info("INPUT0", TensorProto.INT32, ["batch", 1])],
        [helper.make_tensor_value_info("OUTPUT0", TensorProto.INT32, ["batch", 1])],
    )
    return make_model(graph)


def _accumulator_model() -> Any:
    """The seed's accumulator: OUTPUT_STATE = START ? INPUT : INPUT + INPUT_STATE."""
    ints = [("INPUT", ["batch", 1]), ("INPUT_STATE", ["batch", 1]), ("START", ["batch", 1])]
    graph = helper.make_graph(
        [
            helper.make_node("Add", ["INPUT", "INPUT_STATE"], ["sum"]),
            helper.make_node("Cast", ["START"], ["start"], to=TensorProto.BOOL),
            helper.make_node("Where", ["start", "INPUT", "sum"], ["OUTPUT_STATE"]),
            helper.make_node("Identity", ["OUTPUT_STATE"], ["OUTPUT"]),
        ],
        "accumulator",
        [helper.make_tensor_value_info(n, TensorProto.INT32, d) for n, d in ints],
        [
            helper.make_tensor_value_info("OUTPUT", TensorProto.INT32, ["batch", 1]),
            helper.make_tensor_value_info("OUTPUT_STATE", TensorProto.INT32, ["batch", 1]),
        ],
    )
    return make_model(graph)


ACCUMULATOR_BATCHING = """sequence_batching {
  control_input [ { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] } ]
  state [ { input_name: "INPUT_STATE" output_name: "OUTPUT_STATE" data_type: TYPE_INT32 dims: [ 1 ] } ]
}
"""  # noqa: E501


def _vector_config(name: str, extra: str = "", inputs: Sequence[str] = ("INPUT0",)) -> str:
    return make_config(
        name,
        [(n, "FP32", [WIDTH]) for n in inputs],
        [(n.replace("INPUT", "OUTPUT"), "FP32", [WIDTH]) for n in inputs],
        max_batch_size=8,
        extra=extra,
    )


Step = tuple[str, dict[str, str], dict[str, str]]


def _write_ensemble(
    repo: Path,
    name: str,
    inputs: Sequence[tuple[str, str, Sequence[int]]],
    outputs: Sequence[tuple[str, str, Sequence[int]]],
    steps: Sequence[Step],
    max_batch_size: int = 8,
) -> None:
    def pairs(field: str, mapping: dict[str, str]) -> str:
        return " ".join(f'{field} {{ key: "{k}" value: "{v}" }}' for k, v in mapping.items())

    text = ",\n".join(
        f'  {{ model_name: "{model}" model_version: -1 {pairs("input_map", ins)} '
        f"{pairs('output_map', outs)} }}"
        for model, ins, outs in steps
    )
    config = make_config(
        name,
        inputs,
        outputs,
        max_batch_size=max_batch_size,
        platform="ensemble",
        instance_kind=None,
        extra=f"ensemble_scheduling {{\n step [\n{text}\n ]\n}}\n",
    )
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "config.pbtxt").write_text(config, encoding="utf-8")


def _write_composing_models(repo: Path) -> None:
    write_model(repo, "scale", _fp32_unary("scale", "Mul", 3.0), _vector_config("scale"))
    write_model(repo, "square", _fp32_unary("square", "Mul", None), _vector_config("square"))
    write_model(
        repo,
        "add_sub",
        add_sub_model("FP32", ("batch", WIDTH)),
        _vector_config("add_sub", inputs=("INPUT0", "INPUT1")),
    )


PIPELINE_STEPS: list[Step] = [
    ("scale", {"INPUT0": "RAW"}, {"OUTPUT0": "SCALED"}),
    ("square", {"INPUT0": "SCALED"}, {"OUTPUT0": "SQUARED"}),
    ("add_sub", {"INPUT0": "SCALED", "INPUT1": "RAW"}, {"OUTPUT0": "PLUS", "OUTPUT1": "MINUS"}),
]

# Every invalid ensemble in the main repository: its steps, its input RAW (datatype, dims),
# and the reason it is UNAVAILABLE. Its one output is OUT, FP32 [4].
INVALID: dict[str, tuple[list[Step], tuple[str, list[int]], str]] = {
    "bad_unknown_model": (
        [("no_such_model", {"INPUT0": "RAW"}, {"OUTPUT0": "OUT"})],
        ("FP32", [WIDTH]),
        "step 0 ('no_such_model'): model 'no_such_model' (version -1) is not available",
    ),
    "bad_cycle": (
        [
            ("add_sub", {"INPUT0": "RAW", "INPUT1": "BACK"}, {"OUTPUT0": "X", "OUTPUT1": "OUT"}),
            ("square", {"INPUT0": "X"}, {"OUTPUT0": "BACK"}),
        ],
        ("FP32", [WIDTH]),
        "ensemble steps form a cycle or wait forever: 'add_sub', 'square'",
    ),
    "bad_unmapped_input": (
        [("add_sub", {"INPUT0": "RAW"}, {"OUTPUT0": "OUT"})],
        ("FP32", [WIDTH]),
        "step 0 ('add_sub'): inputs not mapped: INPUT1",
    ),
    "bad_doubly_produced": (
        [
            ("scale", {"INPUT0": "RAW"}, {"OUTPUT0": "OUT"}),
            ("square", {"INPUT0": "RAW"}, {"OUTPUT0": "OUT"}),
        ],
        ("FP32", [WIDTH]),
        "step 1 ('square'): ensemble tensor 'OUT' is already produced by step 0 ('scale')",
    ),
    "bad_datatype": (
        [("scale", {"INPUT0": "RAW"}, {"OUTPUT0": "OUT"})],
        ("INT32", [WIDTH]),
        "in ensemble bad_datatype, ensemble tensor RAW: inconsistent data type: TYPE_INT32 is "
        "inferred from model bad_datatype while TYPE_FP32 is inferred from model scale",
    ),
    "bad_shape": (
        [("scale", {"INPUT0": "RAW"}, {"OUTPUT0": "OUT"})],
        ("FP32", [3]),
        "in ensemble bad_shape, ensemble tensor RAW: inconsistent shape: [-1,3] is inferred "
        "from model bad_shape while [-1,4] is inferred from model scale",
    ),
}


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("ensemble_repo")
    _write_composing_models(root)
    # RAW has variable dims: a request of the wrong width passes the ensemble's own checks
    # and is refused by the first step's model, which expects [-1, 4].
    _write_ensemble(
        root,
        "pipeline",
        [("RAW", "FP32", [-1])],
        [(n, "FP32", [WIDTH]) for n in PIPELINE_OUTPUTS],
        PIPELINE_STEPS,
    )
    # Sequences: a stateless step, then the stateful accumulator; both get sequence_id.
    write_model(
        root,
        "int_double",
        _int_double_model(),
        make_config(
            "int_double", [("INPUT0", "INT32", [1])], [("OUTPUT0", "INT32", [1])], max_batch_size=2
        ),
    )
    write_model(
        root,
        "accumulator",
        _accumulator_model(),
        make_config(
            "accumulator",
            [("INPUT", "INT32", [1])],
            [("OUTPUT", "INT32", [1])],
            max_batch_size=2,
            extra=ACCUMULATOR_BATCHING,
        ),
    )
    _write_ensemble(
        root,
        "seq_pipeline",
        [("VALUE", "INT32", [1])],
        [("TOTAL", "INT32", [1]), ("DOUBLED", "INT32", [1])],
        [
            ("int_double", {"INPUT0": "VALUE"}, {"OUTPUT0": "DOUBLED"}),
            ("accumulator", {"INPUT": "DOUBLED"}, {"OUTPUT": "TOTAL"}),
        ],
        max_batch_size=2,
    )
    # max_batch_size 0 over batching models (Triton's ReshapeTensorDims): a tensor without
    # a batch dimension gets a batch of one on its way in and loses it on its way out; one
    # whose full shape is declared ([-1, 4]) passes as it is.
    for name, dims in (("nobatch_pipeline", [WIDTH]), ("fullshape_pipeline", [-1, WIDTH])):
        _write_ensemble(
            root,
            name,
            [("RAW", "FP32", dims)],
            [("SQUARED", "FP32", dims)],
            PIPELINE_STEPS[:2],
            max_batch_size=0,
        )
    # Classification (Triton's model_lifecycle): an ensemble output without a label file of
    # its own takes the labels of the step output that produces it.
    labelled = _vector_config("labelled_square").replace(
        'name: "OUTPUT0"', 'name: "OUTPUT0"\n    label_filename: "labels.txt"'
    )
    write_model(root, "labelled_square", _fp32_unary("labelled_square", "Mul", None), labelled)
    (root / "labelled_square" / "labels.txt").write_text("a\nb\nc\nd\n", encoding="utf-8")
    _write_ensemble(
        root,
        "labelled_pipeline",
        [("RAW", "FP32", [WIDTH])],
        [("SQUARED", "FP32", [WIDTH]), ("SCALED", "FP32", [WIDTH])],
        [
            ("scale", {"INPUT0": "RAW"}, {"OUTPUT0": "SCALED"}),
            ("labelled_square", {"INPUT0": "SCALED"}, {"OUTPUT0": "SQUARED"}),
        ],
    )
    config = root / "labelled_pipeline" / "config.pbtxt"
    config.write_text(
        config.read_text(encoding="utf-8").replace(
            'name: "SCALED"', 'name: "SCALED"\n    label_filename: "own.txt"'
        ),
        encoding="utf-8",
    )
    (root / "labelled_pipeline" / "own.txt").write_text("w\nx\ny\nz\n", encoding="utf-8")
    for name, (steps, (datatype, dims), _) in INVALID.items():
        _write_ensemble(root, name, [("RAW", datatype, dims)], [("OUT", "FP32", [WIDTH])], steps)
    return root


def _start(repo: Path, *args: str, env: dict[str, str] | None = None) -> Iterator[ServerProcess]:
    # The repository holds invalid ensembles on purpose: serve the valid ones.
    proc = ServerProcess([repo], extra_args=["--exit-on-error=false", *args], env=env).start()
    try:
        yield proc
    finally:
        code = proc.stop()
        assert code == 0, f"server exited with {code}:\n{proc.log}"


@pytest.fixture(scope="module")
def server(repo: Path) -> Iterator[ServerProcess]:
    yield from _start(repo)


@pytest.fixture(scope="module")
def client(server: ServerProcess) -> Iterator[grpcclient.InferenceServerClient]:
    with grpcclient.InferenceServerClient(server.url) as c:
        yield c


# --------------------------------------------------------------------------- helpers


def _tensor(name: str, array: np.ndarray, datatype: str = "FP32") -> grpcclient.InferInput:
    tensor = grpcclient.InferInput(name, list(array.shape), datatype)
    tensor.set_data_from_numpy(array)
    return tensor


def _raw(batch: int, seed: int = 0) -> np.ndarray:
    """Small integers in FP32: every output of the pipeline is exact."""
    values = np.arange(batch * WIDTH, dtype=np.float32).reshape(batch, WIDTH)
    return values - np.float32(5 + seed)


def _expected(raw: np.ndarray) -> dict[str, np.ndarray]:
    scaled = raw * np.float32(3)
    return {
        "SCALED": scaled,
        "SQUARED": scaled * scaled,
        "PLUS": scaled + raw,
        "MINUS": scaled - raw,
    }


def _check_pipeline(result: Any, raw: np.ndarray, names: Sequence[str] = PIPELINE_OUTPUTS) -> None:
    expected = _expected(raw)
    got = {o.name for o in result.get_response().outputs}
    assert got == set(names)
    for name in names:
        out = result.as_numpy(name)
        assert out.dtype == np.float32
        np.testing.assert_array_equal(out, expected[name], err_msg=name)


def _stats(client: grpcclient.InferenceServerClient, model: str) -> Any:
    return client.get_inference_statistics(model).model_stats[0]


def _expect_error(call: Any, status: str, message: str) -> None:
    with pytest.raises(InferenceServerException) as info:
        call()
    assert info.value.status() == f"StatusCode.{status}", info.value.message()
    assert info.value.message() == message


# --------------------------------------------------------------------------- the pipeline


def test_ensemble_without_batching_over_batching_models(
    client: grpcclient.InferenceServerClient,
) -> None:
    raw = np.arange(WIDTH, dtype=np.float32)
    inputs = [grpcclient.InferInput("RAW", [WIDTH], "FP32")]
    inputs[0].set_data_from_numpy(raw)
    result = client.infer("nobatch_pipeline", inputs, client_timeout=TIMEOUT)
    squared = result.as_numpy("SQUARED")
    assert squared is not None and squared.shape == (WIDTH,)
    np.testing.assert_allclose(squared, (raw * 3) ** 2)

    rows = np.arange(3 * WIDTH, dtype=np.float32).reshape(3, WIDTH)
    inputs = [grpcclient.InferInput("RAW", [3, WIDTH], "FP32")]
    inputs[0].set_data_from_numpy(rows)
    result = client.infer("fullshape_pipeline", inputs, client_timeout=TIMEOUT)
    squared = result.as_numpy("SQUARED")
    assert squared is not None and squared.shape == (3, WIDTH)
    np.testing.assert_allclose(squared, (rows * 3) ** 2)
    stats = client.get_inference_statistics("scale", as_json=True)["model_stats"][0]
    assert int(stats["inference_count"]) >= 4  # one row, then three: the model batched them


def test_ensemble_classification_labels(client: grpcclient.InferenceServerClient) -> None:
    raw = np.array([[1, -4, 2, 0]], dtype=np.float32)  # SCALED [3,-12,6,0], SQUARED [9,144,36,0]
    outputs = [
        grpcclient.InferRequestedOutput("SQUARED", class_count=2),
        grpcclient.InferRequestedOutput("SCALED", class_count=2),
    ]
    result = client.infer(
        "labelled_pipeline", [_tensor("RAW", raw)], outputs=outputs, client_timeout=TIMEOUT
    )
    # SQUARED: labelled_square's labels; SCALED: the ensemble's own file
    assert result.as_numpy("SQUARED").tolist() == [[b"144.000000:1:b", b"36.000000:2:c"]]
    assert result.as_numpy("SCALED").tolist() == [[b"6.000000:2:y", b"3.000000:0:w"]]


@pytest.mark.parametrize("batch", [1, 3, 8])
def test_pipeline_sync_client_all_outputs(
    client: grpcclient.InferenceServerClient, batch: int
) -> None:
    raw = _raw(batch)
    result = client.infer(
        "pipeline", [_tensor("RAW", raw)], request_id=f"b{batch}", client_timeout=TIMEOUT
    )
    response = result.get_response()
    assert (response.model_name, response.model_version, response.id) == (
        "pipeline",
        "1",
        f"b{batch}",
    )
    _check_pipeline(result, raw)
    for output in response.outputs:
        assert (output.datatype, list(output.shape)) == ("FP32", [batch, WIDTH])
    # Triton 2.51's ensemble response names the sequence of the outputs its steps made,
    # with none in the request too (ensemble_scheduler.cc, r24.10).
    assert _sequence_of(response) == (0, False, False)


def _sequence_of(response: Any) -> tuple[Any, bool, bool]:
    """(sequence_id, sequence_start, sequence_end) of a gRPC response's parameters."""
    params = response.parameters
    sid = params["sequence_id"]
    value = (
        sid.string_param
        if sid.WhichOneof("parameter_choice") == "string_param"
        else sid.int64_param
    )
    return value, params["sequence_start"].bool_param, params["sequence_end"].bool_param


def test_requested_output_subset(client: grpcclient.InferenceServerClient) -> None:
    raw = _raw(2, seed=1)
    wanted = ["MINUS", "SQUARED"]
    result = client.infer(
        "pipeline",
        [_tensor("RAW", raw)],
        outputs=[grpcclient.InferRequestedOutput(n) for n in wanted],
        client_timeout=TIMEOUT,
    )
    assert [o.name for o in result.get_response().outputs] == wanted
    _check_pipeline(result, raw, wanted)


def test_pipeline_metadata_and_config(client: grpcclient.InferenceServerClient) -> None:
    metadata = client.get_model_metadata("pipeline")
    assert metadata.platform == "ensemble"
    assert [(t.name, t.datatype, list(t.shape)) for t in metadata.inputs] == [
        ("RAW", "FP32", [-1, -1])
    ]
    assert [t.name for t in metadata.outputs] == list(PIPELINE_OUTPUTS)
    config = client.get_model_config("pipeline").config
    assert [s.model_name for s in config.ensemble_scheduling.step] == ["scale", "square", "add_sub"]


async def test_pipeline_asyncio_client_concurrent_requests(server: ServerProcess) -> None:
    async with aioclient.InferenceServerClient(server.url) as client:

        async def one(i: int) -> None:
            raw = _raw(1 + i % 4, seed=i)
            result = await client.infer(
                "pipeline", [_tensor("RAW", raw)], request_id=str(i), client_timeout=TIMEOUT
            )
            assert result.get_response().id == str(i)
            _check_pipeline(result, raw)

        await asyncio.gather(*(one(i) for i in range(12)))


def test_pipeline_sync_streaming(client: grpcclient.InferenceServerClient) -> None:
    """Four good requests and a failing one on one stream: the stream keeps serving."""
    results: queue.Queue[tuple[Any, Any]] = queue.Queue()
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    try:
        raws = {str(i): _raw(1 + i, seed=i) for i in range(4)}
        for rid, raw in raws.items():
            client.async_stream_infer("pipeline", [_tensor("RAW", raw)], request_id=rid)
            if rid == "1":
                bad = np.zeros((1, 5), np.float32)
                client.async_stream_infer("pipeline", [_tensor("RAW", bad)], request_id="bad")
        errors = []
        for _ in range(len(raws) + 1):
            result, error = results.get(timeout=TIMEOUT)
            if error is not None:
                errors.append(error.message())
                continue
            rid = result.get_response().id
            _check_pipeline(result, raws.pop(rid))
    finally:
        client.stop_stream()
    assert raws == {}
    assert errors == [
        "in ensemble 'pipeline', [request id: bad] unexpected shape for input 'INPUT0' for "
        f"model 'scale'. Expected [-1,4], got [1,5]. {BATCH_NOTE}"
    ]


async def test_pipeline_asyncio_streaming(server: ServerProcess) -> None:
    raws = {str(i): _raw(2, seed=10 + i) for i in range(3)}

    async def requests() -> Any:
        for rid, raw in raws.items():
            yield {
                "model_name": "pipeline",
                "inputs": [_tensor("RAW", raw)],
                "outputs": [grpcclient.InferRequestedOutput("PLUS")],
                "request_id": rid,
            }

    async with aioclient.InferenceServerClient(server.url) as client:
        seen = []
        async for result, error in client.stream_infer(requests(), stream_timeout=TIMEOUT):
            assert error is None, error
            rid = result.get_response().id
            _check_pipeline(result, raws[rid], ["PLUS"])
            seen.append(rid)
            if len(seen) == len(raws):
                break
    assert sorted(seen) == sorted(raws)


def test_statistics_of_the_ensemble_and_each_composing_model(
    client: grpcclient.InferenceServerClient,
) -> None:
    names = ["pipeline", "scale", "square", "add_sub"]
    before = {n: _stats(client, n) for n in names}
    for batch in (2, 5):
        _check_pipeline(
            client.infer("pipeline", [_tensor("RAW", _raw(batch))], client_timeout=TIMEOUT),
            _raw(batch),
        )
    after = {n: _stats(client, n) for n in names}
    for name in names:
        b, a = before[name], after[name]
        assert a.inference_count - b.inference_count == 7, name
        assert a.execution_count - b.execution_count == 2, name
        success = a.inference_stats.success
        assert success.count - b.inference_stats.success.count == 2, name
        assert success.ns > b.inference_stats.success.ns, name
        assert a.inference_stats.fail.count == b.inference_stats.fail.count, name
        assert a.last_inference >= b.last_inference > 0, name
    # The ensemble's request spans its steps: it takes at least as long as its first one.
    ens_ns = (
        after["pipeline"].inference_stats.success.ns - before["pipeline"].inference_stats.success.ns
    )
    scale_ns = (
        after["scale"].inference_stats.success.ns - before["scale"].inference_stats.success.ns
    )
    assert ens_ns >= scale_ns


# --------------------------------------------------------------------------- failures


def test_failing_step_names_the_ensemble_and_the_model_and_the_server_keeps_serving(
    client: grpcclient.InferenceServerClient,
) -> None:
    before = {n: _stats(client, n) for n in ("pipeline", "scale", "square")}
    bad = np.zeros((1, 3), np.float32)  # the ensemble takes [-1, -1]; 'scale' needs [-1, 4]
    _expect_error(
        lambda: client.infer("pipeline", [_tensor("RAW", bad)], request_id="wrong-width"),
        "INVALID_ARGUMENT",
        "in ensemble 'pipeline', [request id: wrong-width] unexpected shape for input "
        f"'INPUT0' for model 'scale'. Expected [-1,4], got [1,3]. {BATCH_NOTE}",
    )
    _expect_error(
        lambda: client.infer("pipeline", [_tensor("RAW", bad)]),
        "INVALID_ARGUMENT",
        "in ensemble 'pipeline', [request id: <id_unknown>] unexpected shape for input "
        f"'INPUT0' for model 'scale'. Expected [-1,4], got [1,3]. {BATCH_NOTE}",
    )
    after = {n: _stats(client, n) for n in ("pipeline", "scale", "square")}
    # As in Triton: each failed ensemble request counts twice (reason OTHER: its error
    # response, then its release); the step request was refused before 'scale' accepted
    # it, so it is not a failure of 'scale'.
    fails = {
        n: after[n].inference_stats.fail.count - before[n].inference_stats.fail.count for n in after
    }
    assert fails == {"pipeline": 4, "scale": 0, "square": 0}
    assert after["square"].inference_count == before["square"].inference_count  # never reached
    raw = _raw(2)
    _check_pipeline(client.infer("pipeline", [_tensor("RAW", raw)], client_timeout=TIMEOUT), raw)


def test_ensemble_request_checked_against_the_ensemble_config(
    client: grpcclient.InferenceServerClient,
) -> None:
    """Errors the ensemble itself finds name the ensemble, not a step."""
    _expect_error(
        lambda: client.infer("pipeline", [_tensor("RAW", _raw(9))]),
        "INVALID_ARGUMENT",
        "[request id: <id_unknown>] inference request batch-size must be <= 8 for 'pipeline'",
    )
    _expect_error(
        lambda: client.infer("pipeline", [_tensor("INPUT0", _raw(1))]),
        "INVALID_ARGUMENT",
        "unexpected inference input 'INPUT0' for model 'pipeline'",
    )
    _expect_error(
        lambda: client.infer(
            "pipeline",
            [_tensor("RAW", _raw(1))],
            outputs=[grpcclient.InferRequestedOutput("X")],
        ),
        "INVALID_ARGUMENT",
        "unexpected inference output 'X' for model 'pipeline'",
    )


def test_invalid_ensembles_are_unavailable_with_the_reason_while_valid_ones_serve(
    client: grpcclient.InferenceServerClient,
) -> None:
    index = {m.name: m for m in client.get_model_repository_index().models}
    for name, (_, (datatype, dims), reason) in INVALID.items():
        entry = index[name]
        assert (entry.version, entry.state, entry.reason) == ("1", "UNAVAILABLE", reason), name
        assert not client.is_model_ready(name)
        raw = np.zeros([1, *dims], np.int32 if datatype == "INT32" else np.float32)
        _expect_error(
            lambda n=name, r=raw, d=datatype: client.infer(n, [_tensor("RAW", r, d)]),
            "NOT_FOUND",  # the reason is in the index (above), as Triton's
            f"Request for unknown model: '{name}' has no available versions",
        )
    for name in ("pipeline", "seq_pipeline", "scale", "square", "add_sub"):
        assert (index[name].state, index[name].reason) == ("READY", ""), name
        assert client.is_model_ready(name)
    raw = _raw(1)
    _check_pipeline(client.infer("pipeline", [_tensor("RAW", raw)], client_timeout=TIMEOUT), raw)


# --------------------------------------------------------------------------- sequences


def _seq(
    client: grpcclient.InferenceServerClient,
    sequence_id: int,
    value: int,
    start: bool = False,
    end: bool = False,
) -> tuple[int, int]:
    """One request to seq_pipeline: (TOTAL, DOUBLED)."""
    result = client.infer(
        "seq_pipeline",
        [_tensor("VALUE", np.array([[value]], np.int32), "INT32")],
        sequence_id=sequence_id,
        sequence_start=start,
        sequence_end=end,
        client_timeout=TIMEOUT,
    )
    total, doubled = result.as_numpy("TOTAL"), result.as_numpy("DOUBLED")
    assert total.dtype == doubled.dtype == np.int32
    assert total.shape == doubled.shape == (1, 1)
    return int(total[0, 0]), int(doubled[0, 0])


def test_sequence_parameters_pass_through_the_ensemble(
    client: grpcclient.InferenceServerClient,
) -> None:
    """Running sums of 2*VALUE per sequence, with two sequences interleaved."""
    before = {n: _stats(client, n) for n in ("seq_pipeline", "int_double", "accumulator")}
    assert _seq(client, 1001, 1, start=True) == (2, 2)
    assert _seq(client, 1002, 10, start=True) == (20, 20)
    assert _seq(client, 1001, 2) == (6, 4)
    assert _seq(client, 1002, 20, end=True) == (60, 40)
    assert _seq(client, 1001, 3) == (12, 6)
    assert _seq(client, 1001, 4, end=True) == (20, 8)
    # A new sequence under an ended one's ID starts from its START value again.
    assert _seq(client, 1002, 5, start=True) == (10, 10)
    assert _seq(client, 1002, 1, end=True) == (12, 2)
    after = {n: _stats(client, n) for n in ("seq_pipeline", "int_double", "accumulator")}
    for name in after:
        assert after[name].inference_count - before[name].inference_count == 8, name
        assert (
            after[name].inference_stats.success.count - before[name].inference_stats.success.count
            == 8
        ), name


async def test_many_sequences_from_concurrent_clients_through_the_ensemble(
    server: ServerProcess,
) -> None:
    """Six sequences at once (the accumulator has two slots: the rest wait in its backlog)."""
    async with aioclient.InferenceServerClient(server.url) as client:

        async def sequence(sid: int) -> list[int]:
            values = [sid % 7 + k for k in range(5)]
            totals = []
            for k, value in enumerate(values):
                result = await client.infer(
                    "seq_pipeline",
                    [_tensor("VALUE", np.array([[value]], np.int32), "INT32")],
                    sequence_id=sid,
                    sequence_start=k == 0,
                    sequence_end=k == len(values) - 1,
                    client_timeout=TIMEOUT,
                )
                totals.append(int(result.as_numpy("TOTAL")[0, 0]))
            assert totals == list(np.cumsum([2 * v for v in values])), sid
            return totals

        await asyncio.gather(*(sequence(sid) for sid in range(2001, 2007)))


def test_sequence_through_the_ensemble_over_a_stream(
    client: grpcclient.InferenceServerClient,
) -> None:
    results: queue.Queue[tuple[Any, Any]] = queue.Queue()
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    try:
        plan = [(3001, 4, True, False), (3002, 1, True, False), (3001, 5, False, False)]
        plan += [(3002, 2, False, True), (3001, 6, False, True)]
        totals = []
        for sid, value, start, end in plan:
            client.async_stream_infer(
                "seq_pipeline",
                [_tensor("VALUE", np.array([[value]], np.int32), "INT32")],
                request_id=f"{sid}-{value}",
                sequence_id=sid,
                sequence_start=start,
                sequence_end=end,
            )
            result, error = results.get(timeout=TIMEOUT)  # one at a time: order is the plan's
            assert error is None, error
            assert result.get_response().id == f"{sid}-{value}"
            assert _sequence_of(result.get_response()) == (sid, start, end)  # Triton's qa
            totals.append(int(result.as_numpy("TOTAL")[0, 0]))
    finally:
        client.stop_stream()
    assert totals == [8, 2, 18, 6, 30]


def test_sequence_errors_inside_the_ensemble_name_the_sequence_model(
    client: grpcclient.InferenceServerClient,
) -> None:
    value = [_tensor("VALUE", np.array([[1]], np.int32), "INT32")]
    _expect_error(
        lambda: client.infer("seq_pipeline", value),
        "INVALID_ARGUMENT",
        "in ensemble 'seq_pipeline', inference request to model 'accumulator' must specify a "
        "non-zero or non-empty correlation ID",
    )
    _expect_error(
        lambda: client.infer("seq_pipeline", value, sequence_id=4242),
        "INVALID_ARGUMENT",
        "in ensemble 'seq_pipeline', inference request for sequence 4242 to model "
        "'accumulator' must specify the START flag on the first request of the sequence",
    )
    assert _seq(client, 4242, 3, start=True, end=True) == (6, 6)  # still serving


# --------------------------------------------------------------------------- concurrency, batching

DELAY = 4  # TRITONSERVER_DELAY_SCHEDULER: each dynamic batcher holds its first batch for 4 jobs


@pytest.fixture(scope="module")
def delay_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("ensemble_delay_repo")
    write_model(root, "scale", _fp32_unary("scale", "Mul", 3.0), _vector_config("scale"))
    batching = "dynamic_batching { }"
    for name in ("inc_fanout", "inc_batched"):
        write_model(root, name, _fp32_unary(name, "Add", 1.0), _vector_config(name, batching))
    scaled = [("scale", {"INPUT0": "RAW"}, {"OUTPUT0": "SCALED"})]
    fan = [("inc_fanout", {"INPUT0": "SCALED"}, {"OUTPUT0": f"OUT{i}"}) for i in range(DELAY)]
    _write_ensemble(
        root,
        "fanout",
        [("RAW", "FP32", [WIDTH])],
        [(f"OUT{i}", "FP32", [WIDTH]) for i in range(DELAY)],
        scaled + fan,
    )
    _write_ensemble(
        root,
        "batched",
        [("RAW", "FP32", [WIDTH])],
        [("OUT", "FP32", [WIDTH])],
        [*scaled, ("inc_batched", {"INPUT0": "SCALED"}, {"OUTPUT0": "OUT"})],
    )
    yield from _start(root, env={"TRITONSERVER_DELAY_SCHEDULER": str(DELAY)})


def test_independent_steps_run_concurrently(delay_server: ServerProcess) -> None:
    """Four steps of one request call one dynamically batched model that holds its first
    batch until four jobs are queued: the request completes only if all four steps were
    submitted before any of them finished (run one after another, the first would wait
    forever), and they run as one batch of four."""
    raw = _raw(1)
    with grpcclient.InferenceServerClient(delay_server.url) as client:
        result = client.infer("fanout", [_tensor("RAW", raw)], client_timeout=TIMEOUT)
        for i in range(DELAY):
            np.testing.assert_array_equal(result.as_numpy(f"OUT{i}"), raw * 3 + 1)
        stats = _stats(client, "inc_fanout")
        ensemble = _stats(client, "fanout")
    assert (stats.inference_count, stats.execution_count) == (DELAY, 1)
    assert [(b.batch_size, b.compute_infer.count) for b in stats.batch_stats] == [(DELAY, 1)]
    assert stats.inference_stats.success.count == DELAY
    assert (ensemble.inference_count, ensemble.execution_count) == (1, 1)


async def test_composing_model_batches_across_concurrent_ensemble_requests(
    delay_server: ServerProcess,
) -> None:
    batches = [1, 2, 1, 3]  # four ensemble requests, nine inferences
    async with aioclient.InferenceServerClient(delay_server.url) as client:

        async def one(i: int, batch: int) -> None:
            raw = _raw(batch, seed=i)
            result = await client.infer(
                "batched", [_tensor("RAW", raw)], request_id=str(i), client_timeout=TIMEOUT
            )
            np.testing.assert_array_equal(result.as_numpy("OUT"), raw * 3 + 1)

        await asyncio.gather(*(one(i, b) for i, b in enumerate(batches)))
        inc = (await client.get_inference_statistics("inc_batched")).model_stats[0]
        ensemble = (await client.get_inference_statistics("batched")).model_stats[0]
    assert (inc.inference_count, inc.execution_count) == (7, 1)
    assert [(b.batch_size, b.compute_infer.count) for b in inc.batch_stats] == [(7, 1)]
    assert inc.inference_stats.success.count == 4
    assert (ensemble.inference_count, ensemble.execution_count) == (7, 4)
    assert ensemble.inference_stats.success.count == 4


# --------------------------------------------------------------------------- explicit mode
#
# The start-up test has a server of its own (it checks what --load-model alone loaded);
# the others share one explicit-mode server and load what they need themselves.


def _explicit(repo: Path, *startup: str) -> Iterator[ServerProcess]:
    loads = [arg for name in startup for arg in ("--load-model", name)]
    yield from _start(repo, "--model-control-mode", "explicit", *loads)


@pytest.fixture
def startup_server(repo: Path) -> Iterator[ServerProcess]:
    yield from _explicit(repo, "pipeline")


@pytest.fixture(scope="module")
def explicit_server(repo: Path) -> Iterator[ServerProcess]:
    yield from _explicit(repo, "add_sub")


def _ready(client: grpcclient.InferenceServerClient) -> set[str]:
    return {m.name for m in client.get_model_repository_index().models if m.state == "READY"}


def _load_pipeline_and_its_models(client: grpcclient.InferenceServerClient) -> None:
    """Composing models first, so this set-up does not rely on the ensemble loading them."""
    for name in ("scale", "square", "add_sub", "pipeline"):
        if not client.is_model_ready(name):
            client.load_model(name)
    assert {"pipeline", "scale", "square", "add_sub"} <= _ready(client)


def test_explicit_load_model_at_start_loads_the_composing_models(
    startup_server: ServerProcess,
) -> None:
    with grpcclient.InferenceServerClient(startup_server.url) as client:
        index = {m.name: (m.state, m.reason) for m in client.get_model_repository_index().models}
        assert _ready(client) == {"pipeline", "scale", "square", "add_sub"}, index
        raw = _raw(2)
        _check_pipeline(
            client.infer("pipeline", [_tensor("RAW", raw)], client_timeout=TIMEOUT), raw
        )


def test_explicit_load_of_an_ensemble_loads_its_composing_models(
    explicit_server: ServerProcess,
) -> None:
    with grpcclient.InferenceServerClient(explicit_server.url) as client:
        assert not ({"seq_pipeline", "int_double", "accumulator"} & _ready(client))
        client.load_model("seq_pipeline")
        assert {"seq_pipeline", "int_double", "accumulator"} <= _ready(client)
        assert _seq(client, 77, 4, start=True) == (8, 8)
        assert _seq(client, 77, 1, end=True) == (10, 2)


def test_unload_composing_model_unloads_the_ensemble_until_it_is_back(
    explicit_server: ServerProcess,
) -> None:
    """Triton 2.51 (checked on the reference): without unload_dependents too, the
    ensemble calling the model goes, and comes back when the model is loaded again."""
    with grpcclient.InferenceServerClient(explicit_server.url) as client:
        _load_pipeline_and_its_models(client)
        client.unload_model("square")
        assert not client.is_model_ready("square")
        assert not client.is_model_ready("pipeline")
        index = {m.name: m for m in client.get_model_repository_index().models}
        assert (index["pipeline"].state, index["pipeline"].reason) == ("UNAVAILABLE", "unloaded")
        raw = _raw(1)
        _expect_error(
            lambda: client.infer("pipeline", [_tensor("RAW", raw)], request_id="r1"),
            "NOT_FOUND",
            "Request for unknown model: 'pipeline' has no available versions",
        )
        # The other composing models keep serving directly.
        scaled = client.infer("scale", [_tensor("INPUT0", raw)]).as_numpy("OUTPUT0")
        np.testing.assert_array_equal(scaled, raw * 3)
        client.load_model("square")  # the ensemble is not named: it comes back by itself
        assert client.is_model_ready("pipeline")
        _check_pipeline(
            client.infer("pipeline", [_tensor("RAW", raw)], client_timeout=TIMEOUT), raw
        )
        stats = client.get_inference_statistics("pipeline").model_stats[0]
        assert stats.inference_stats.success.count == 1  # a new load: counted afresh


def test_unload_composing_model_with_dependents_unloads_the_ensemble(
    explicit_server: ServerProcess,
) -> None:
    with grpcclient.InferenceServerClient(explicit_server.url) as client:
        _load_pipeline_and_its_models(client)
        client.unload_model("scale", unload_dependents=True)
        assert not client.is_model_ready("scale")
        assert not client.is_model_ready("pipeline")
        assert client.is_model_ready("square") and client.is_model_ready("add_sub")
        index = {m.name: m for m in client.get_model_repository_index().models}
        assert (index["pipeline"].state, index["pipeline"].reason) == ("UNAVAILABLE", "unloaded")
        _expect_error(
            lambda: client.infer("pipeline", [_tensor("RAW", _raw(1))]),
            "NOT_FOUND",
            "Request for unknown model: 'pipeline' has no available versions",
        )
        # Loading it all again serves again.
        _load_pipeline_and_its_models(client)
        raw = _raw(3)
        _check_pipeline(
            client.infer("pipeline", [_tensor("RAW", raw)], client_timeout=TIMEOUT), raw
        )


SEQ_CHAIN = ("seq_pipeline", "int_double", "accumulator")


def _unload_seq_chain(client: grpcclient.InferenceServerClient) -> None:
    """Nothing of seq_pipeline loaded, so that a load of it brings its composing models."""
    for name in SEQ_CHAIN:
        client.unload_model(name)
    assert not set(SEQ_CHAIN) & _ready(client)


def test_unload_ensemble_with_dependents_unloads_its_composing_models(
    explicit_server: ServerProcess,
) -> None:
    """Triton's unload_dependents (L0_lifecycle test_model_control_ensemble): the models
    that came in with the ensemble go with it, over gRPC and over REST; without the flag
    they stay; one loaded by name before the ensemble stays."""
    with (
        grpcclient.InferenceServerClient(explicit_server.url) as client,
        GatewayProcess(explicit_server.url) as gateway,
    ):
        rest = httpclient.InferenceServerClient(gateway.url)
        for unload in (client.unload_model, rest.unload_model):
            _unload_seq_chain(client)
            client.load_model("seq_pipeline")
            assert set(SEQ_CHAIN) <= _ready(client)
            unload("seq_pipeline", unload_dependents=True)
            assert not set(SEQ_CHAIN) & _ready(client)
            index = {
                m.name: (m.state, m.reason) for m in client.get_model_repository_index().models
            }
            assert index["int_double"] == ("UNAVAILABLE", "unloaded")
        rest.load_model("seq_pipeline")
        rest.unload_model("seq_pipeline")
        assert {"int_double", "accumulator"} <= _ready(client)
        _unload_seq_chain(client)
        client.load_model("accumulator")
        client.load_model("seq_pipeline")
        client.unload_model("seq_pipeline", unload_dependents=True)
        assert _ready(client) & set(SEQ_CHAIN) == {"accumulator"}
        rest.close()


def test_unloading_the_ensemble_leaves_its_composing_models_loaded(
    explicit_server: ServerProcess,
) -> None:
    with grpcclient.InferenceServerClient(explicit_server.url) as client:
        _load_pipeline_and_its_models(client)
        client.unload_model("pipeline")
        assert not client.is_model_ready("pipeline")
        assert {"scale", "square", "add_sub"} <= _ready(client)
