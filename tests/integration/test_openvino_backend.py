"""The OpenVINO backend (``backend: "openvino"``) through tritonclient: IR models written
by openvino's own API (tests/framework_models/openvino_models.py) and an ONNX model read
by OpenVINO; Triton's fixed batch (ENABLE_BATCH_PADDING), its parameters and load errors,
auto-complete, dynamic batching with two instances, sequence controls with implicit
state, an ensemble step, and instances in worker processes.
"""

from __future__ import annotations

import concurrent.futures
from pathlib import Path

import models
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from framework_support import make_models, need_framework
from integration_support import expect_error, infer_input, running_server
from server_process import FRONTENDS

pytestmark = pytest.mark.usefixtures("_openvino")

IO = (
    [("INPUT0", "FP32", [4]), ("INPUT1", "FP32", [4])],
    [("OUTPUT0", "FP32", [4]), ("OUTPUT1", "FP32", [4])],
)


@pytest.fixture
def _openvino() -> None:
    need_framework("openvino", "openvino")


def _param(key: str, value: str) -> str:
    return f'parameters: {{ key: "{key}" value: {{ string_value: "{value}" }} }}\n'


def _write(root: Path, name: str, inputs: list, outputs: list, **kwargs: object) -> None:
    text = models.make_config(name, inputs, outputs, platform="", **kwargs)  # type: ignore[arg-type]
    (root / name).mkdir(parents=True, exist_ok=True)
    (root / name / "config.pbtxt").write_text(text.replace('platform: ""', 'backend: "openvino"'))


def _add_sub(client: grpcclient.InferenceServerClient, model: str, rows: int | None) -> None:
    shape = (4,) if rows is None else (rows, 4)
    a = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    b = np.full(shape, 2.0, dtype=np.float32)
    result = client.infer(
        model, [infer_input("INPUT0", a, "FP32"), infer_input("INPUT1", b, "FP32")]
    )
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)


def _reason(client: grpcclient.InferenceServerClient, model: str) -> str:
    for entry in client.get_model_repository_index().models:
        if entry.name == model:
            return str(entry.reason)
    raise AssertionError(f"{model} not in the index")


ENSEMBLE = """name: "ensemble"
platform: "ensemble"
max_batch_size: 0
input [ { name: "A" data_type: TYPE_FP32 dims: [ 4 ] },
        { name: "B" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "SUM" data_type: TYPE_FP32 dims: [ 4 ] } ]
ensemble_scheduling { step [ { model_name: "nobatch" model_version: -1
  input_map { key: "INPUT0" value: "A" } input_map { key: "INPUT1" value: "B" }
  output_map { key: "OUTPUT0" value: "SUM" } } ] }
"""


def test_serves_batches_parameters_and_errors(tmp_path: Path) -> None:
    make_models(
        "openvino_models",
        tmp_path,
        "padded:dynamic_batch",
        "fixed:fixed_batch",
        "nobatch",
        "autocomplete:dynamic_batch",
        *(f"{n}:nobatch" for n in ("bad_streams", "bad_hint", "unknown_input", "bad_dims")),
        "bad_type:nobatch",
        "too_many:nobatch",
        "accumulate",
    )
    _write(
        tmp_path,
        "accumulate",
        [("INPUT", "INT32", [1])],
        [("OUTPUT", "INT32", [1])],
        extra="sequence_batching {\n"
        '  control_input [ { name: "START" control [ { kind: CONTROL_SEQUENCE_START '
        "int32_false_true: [ 0, 1 ] } ] } ]\n"
        '  state [ { input_name: "STATE" output_name: "OUTPUT_STATE" data_type: TYPE_INT32 '
        "dims: [ 1 ] } ]\n}",
    )
    _write(
        tmp_path,
        "padded",
        *IO,
        max_batch_size=8,
        instance_count=2,
        extra="dynamic_batching { max_queue_delay_microseconds: 20000 }\n"
        + _param("ENABLE_BATCH_PADDING", "YES")
        + _param("NUM_STREAMS", "1")
        + _param("PERFORMANCE_HINT", "latency"),
    )
    _write(tmp_path, "fixed", *IO, max_batch_size=2)
    _write(tmp_path, "nobatch", *IO)
    (tmp_path / "autocomplete" / "config.pbtxt").write_text('backend: "openvino"\n')
    _write(tmp_path, "bad_streams", *IO, extra=_param("NUM_STREAMS", "many"))
    _write(tmp_path, "bad_hint", *IO, extra=_param("PERFORMANCE_HINT", "fast"))
    _write(tmp_path, "unknown_input", [("INPUT0", "FP32", [4]), ("X", "FP32", [4])], IO[1])
    _write(tmp_path, "bad_dims", [("INPUT0", "FP32", [4]), ("INPUT1", "FP32", [5])], IO[1])
    _write(tmp_path, "bad_type", [("INPUT0", "FP64", [4]), ("INPUT1", "FP64", [4])], IO[1])
    _write(tmp_path, "too_many", [("INPUT0", "FP32", [4])], IO[1])
    # ONNX read by OpenVINO (default_model_filename), as Triton's backend allows.
    onnx_dir = models.write_model(
        tmp_path, "onnx", models.add_sub_model(dims=("batch", 4)), None, filename="model.onnx"
    )
    _write(
        tmp_path,
        "onnx",
        *IO,
        max_batch_size=2,
        extra='default_model_filename: "model.onnx"\n' + _param("ENABLE_BATCH_PADDING", "yes"),
    )
    assert (onnx_dir / "1" / "model.onnx").is_file()
    (tmp_path / "ensemble" / "1").mkdir(parents=True)
    (tmp_path / "ensemble" / "config.pbtxt").write_text(ENSEMBLE)
    with (
        running_server([tmp_path], ["--exit-on-error=false"]) as server,
        grpcclient.InferenceServerClient(server.url) as client,
    ):
        # Padded to the fixed batch of 8; concurrent requests merged by the dynamic batcher.
        _add_sub(client, "padded", rows=3)
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda _: _add_sub(client, "padded", rows=1), range(16)))
        stats = client.get_inference_statistics("padded").model_stats[0]
        assert stats.inference_count == 19
        assert stats.execution_count < 17  # some of the 16 concurrent requests were merged

        _add_sub(client, "fixed", rows=2)  # a batch-1 IR set to max_batch_size (set_batch)
        expect_error(
            lambda: _add_sub(client, "fixed", rows=1),
            "INTERNAL",
            "expected requests with batch size '2', got '1'... this error can be avoided by "
            "setting 'ENABLE_BATCH_PADDING' parameter in model configuration to 'YES' at a "
            "performance cost.",
        )
        _add_sub(client, "nobatch", rows=None)
        _add_sub(client, "onnx", rows=1)

        a = np.ones(4, np.float32)
        out = client.infer("ensemble", [infer_input("A", a, "FP32"), infer_input("B", a, "FP32")])
        np.testing.assert_array_equal(out.as_numpy("SUM"), a + a)

        for sequence, values in ((7, [1, 2, 3]), (8, [10, 20])):  # controls + implicit state
            total = 0
            for i, v in enumerate(values):
                total += v
                out = client.infer(
                    "accumulate",
                    [infer_input("INPUT", np.array([v], np.int32), "INT32")],
                    sequence_id=sequence,
                    sequence_start=i == 0,
                    sequence_end=i == len(values) - 1,
                )
                assert int(out.as_numpy("OUTPUT")[0]) == total

        config = client.get_model_config("autocomplete").config
        assert config.max_batch_size == 4  # Triton's default-max-batch-size
        assert config.HasField("dynamic_batching")
        assert [(t.name, list(t.dims)) for t in config.input] == [("INPUT0", [4]), ("INPUT1", [4])]
        assert config.default_model_filename == "model.xml"
        _add_sub(client, "autocomplete", rows=4)
        assert "autofilled max_batch_size to 4 for model 'autocomplete'" in server.log

        reasons = {
            name: _reason(client, name)
            for name in ("bad_streams", "bad_hint", "unknown_input", "bad_dims", "bad_type")
        }
        reasons["too_many"] = _reason(client, "too_many")
    assert reasons["bad_streams"] == (
        "Invalid argument: expected the parameter 'NUM_STREAMS' to be either "
        "AUTO/NUMA/<int_value>, got many"
    )
    assert "to be LATENCY/THROUGHPUT/CUMULATIVE_THROUGHPUT, got fast" in reasons["bad_hint"]
    assert (
        "unexpected inference input 'X', allowed inputs are: INPUT0, INPUT1"
        in reasons["unknown_input"]
    )
    assert (
        "model 'bad_dims', tensor 'INPUT1': the model expects 1 dimensions (shape [4]) but the "
        "model configuration specifies 1 dimensions (shape [5])" in reasons["bad_dims"]
    )
    assert (
        "Internal: unsupported datatype TYPE_FP64 for input 'INPUT0' for model 'bad_type'"
        in reasons["bad_type"]
    )
    assert (
        "unable to load model 'too_many', configuration expects 1 inputs, model provides 2"
        in reasons["too_many"]
    )


def test_worker_processes_complete_the_config(tmp_path: Path) -> None:
    """With --frontends 2 and instance workers each instance opens in a process of its
    own: the parent's config is completed from what the worker found, and it serves."""
    if FRONTENDS != "0":
        pytest.skip("names its layout itself: run once, in test.sh's first pass")
    make_models("openvino_models", tmp_path, "autocomplete:dynamic_batch")
    (tmp_path / "autocomplete" / "config.pbtxt").write_text(
        'backend: "openvino"\nmax_batch_size: 2\ninstance_group [ { count: 2 kind: KIND_CPU } ]\n'
        + _param("ENABLE_BATCH_PADDING", "YES")
    )
    env = {"SERVICE_INSTANCE_WORKERS": "1"}
    with (
        running_server([tmp_path], ["--frontends", "2"], env=env) as server,
        grpcclient.InferenceServerClient(server.url) as client,
    ):
        config = client.get_model_config("autocomplete").config
        assert [(t.name, list(t.dims)) for t in config.output] == [
            ("OUTPUT0", [4]),
            ("OUTPUT1", [4]),
        ]
        _add_sub(client, "autocomplete", rows=1)
        _add_sub(client, "autocomplete", rows=2)
