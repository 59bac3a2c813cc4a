"""The PyTorch backend (``platform: "pytorch_libtorch"``) through tritonclient: Triton's
naming rules, datatypes, parameters and load errors (L0_libtorch_io_types' and
L0_libtorch_inference_mode's log checks), BYTES as List[str], dict inputs, dynamic
batching, implicit state with sequence controls, weight sharing, and instances in worker
processes. Models are scripted by tests/framework_models/torch_models.py.
"""

from __future__ import annotations

import concurrent.futures
from pathlib import Path

import models
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from framework_support import make_models, need_framework
from integration_support import bytes_array, expect_error, infer_input, running_server
from server_process import FRONTENDS

pytestmark = pytest.mark.usefixtures("_torch")


@pytest.fixture
def _torch() -> None:
    need_framework("torch", "torch")


def _config(name: str, inputs: list, outputs: list, **kwargs: object) -> str:
    return models.make_config(name, inputs, outputs, platform="pytorch_libtorch", **kwargs)  # type: ignore[arg-type]


def _write(root: Path, name: str, config: str) -> None:
    (root / name).mkdir(parents=True, exist_ok=True)
    (root / name / "config.pbtxt").write_text(config)


ADD_SUB_IO = (
    [("INPUT0", "FP32", [4]), ("INPUT1", "FP32", [4])],
    [("OUTPUT__0", "FP32", [4]), ("OUTPUT__1", "FP32", [4])],
)


def _add_sub(client: grpcclient.InferenceServerClient, model: str, rows: int = 1) -> None:
    a = np.arange(4 * rows, dtype=np.float32).reshape(rows, 4)
    b = np.full((rows, 4), 2.0, dtype=np.float32)
    result = client.infer(
        model, [infer_input("INPUT0", a, "FP32"), infer_input("INPUT1", b, "FP32")]
    )
    np.testing.assert_array_equal(result.as_numpy("OUTPUT__0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT__1"), a - b)


def test_serves_types_names_and_batches(tmp_path: Path) -> None:
    make_models("torch_models", tmp_path, "add_sub", "dict_input", "strings", "wrong_type")
    _write(
        tmp_path,
        "add_sub",
        _config(
            "add_sub",
            *ADD_SUB_IO,
            max_batch_size=8,
            instance_count=2,
            extra="dynamic_batching { max_queue_delay_microseconds: 20000 }\n"
            'parameters: { key: "INFERENCE_MODE" value: { string_value: "false" } }',
        ),
    )
    _write(
        tmp_path,
        "dict_input",
        _config("dict_input", [("x", "FP32", [3]), ("y", "FP32", [3])], [("OUT", "FP32", [3])]),
    )
    _write(
        tmp_path,
        "strings",
        _config("strings", [("TEXT", "BYTES", [2])], [("OUT__0", "BYTES", [2])]),
    )
    _write(
        tmp_path,
        "wrong_type",
        _config("wrong_type", [("INPUT0", "FP32", [2])], [("OUTPUT__0", "FP32", [2])]),
    )
    with (
        running_server([tmp_path]) as server,
        grpcclient.InferenceServerClient(server.url) as client,
    ):
        assert "Inference Mode is disabled for model instance 'add_sub'" in server.log
        _add_sub(client, "add_sub", rows=3)
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda _: _add_sub(client, "add_sub"), range(16)))
        stats = client.get_inference_statistics("add_sub").model_stats[0]
        assert stats.inference_count == 19
        assert stats.execution_count < 17  # some of the 16 concurrent requests were merged

        x = np.array([1, 2, 3], dtype=np.float32)
        y = np.array([10, 20, 30], dtype=np.float32)
        out = client.infer("dict_input", [infer_input("x", x, "FP32"), infer_input("y", y, "FP32")])
        np.testing.assert_array_equal(out.as_numpy("OUT"), x * 2 + y)

        text = bytes_array(["ab", "cd"])
        out = client.infer("strings", [infer_input("TEXT", text, "BYTES")])
        assert list(out.as_numpy("OUT__0")) == [b"AB!", b"CD!"]

        expect_error(
            lambda: client.infer(
                "wrong_type", [infer_input("INPUT0", np.ones(2, np.float32), "FP32")]
            ),
            "INVALID_ARGUMENT",
            "configuration expects datatype TYPE_FP32 for output 'OUTPUT__0', model provides "
            "TYPE_INT64",
        )


def _reason(client: grpcclient.InferenceServerClient, model: str) -> str:
    for entry in client.get_model_repository_index().models:
        if entry.name == model:
            return str(entry.reason)
    raise AssertionError(f"{model} not in the index")


def test_load_errors_name_the_rule(tmp_path: Path) -> None:
    """L0_libtorch_io_types' three log checks and the input count, as load reasons."""
    names = ["bad_input", "bad_output", "bad_corrid", "too_many", "no_file"]
    make_models("torch_models", tmp_path, *(f"{n}:add_sub" for n in names[:4]))
    (tmp_path / "no_file" / "1").mkdir(parents=True)
    io = ADD_SUB_IO
    _write(
        tmp_path,
        "bad_input",
        _config("bad_input", [("INPUT0", "UINT32", [4]), ("INPUT1", "UINT32", [4])], io[1]),
    )
    _write(tmp_path, "bad_output", _config("bad_output", io[0], [("OUTPUT__0", "UINT64", [4])]))
    _write(
        tmp_path,
        "bad_corrid",
        _config(
            "bad_corrid",
            *io,
            max_batch_size=4,
            extra='sequence_batching { control_input [ { name: "CORRID__2" control [ '
            "{ kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT32 } ] } ] }",
        ),
    )
    _write(tmp_path, "too_many", _config("too_many", [("INPUT0", "FP32", [4])], io[1]))
    _write(tmp_path, "no_file", _config("no_file", *io))
    with (
        running_server([tmp_path], ["--exit-on-error=false"]) as server,
        grpcclient.InferenceServerClient(server.url) as client,
    ):
        reasons = {name: _reason(client, name) for name in names}
    assert (
        "unsupported datatype TYPE_UINT32 for input 'INPUT0' for model 'bad_input'"
        in reasons["bad_input"]
    )
    assert (
        "unsupported datatype TYPE_UINT64 for output 'OUTPUT__0' for model 'bad_output'"
        in reasons["bad_output"]
    )
    assert (
        "input 'CORRID__2' type 'TYPE_UINT32' is not supported by PyTorch." in reasons["bad_corrid"]
    )
    assert (
        "unable to load model 'too_many', configuration expects 1 inputs, model provides 2"
        in reasons["too_many"]
    )
    assert "unable to find" in reasons["no_file"] and "model.pt" in reasons["no_file"]


def test_implicit_state_and_controls(tmp_path: Path) -> None:
    make_models("torch_models", tmp_path, "accumulate")
    config = _config(
        "accumulate",
        [("INPUT__0", "INT32", [1])],
        [("OUTPUT__0", "INT32", [1])],
        max_batch_size=4,
        extra="sequence_batching {\n"
        "  max_sequence_idle_microseconds: 60000000\n"
        '  control_input [ { name: "START__1" control [ { kind: CONTROL_SEQUENCE_START '
        "int32_false_true: [ 0, 1 ] } ] } ]\n"
        '  state [ { input_name: "STATE__2" output_name: "OUTPUT_STATE__1" data_type: TYPE_INT32 '
        "dims: [ 1 ] } ]\n}",
    )
    _write(tmp_path, "accumulate", config)
    with (
        running_server([tmp_path]) as server,
        grpcclient.InferenceServerClient(server.url) as client,
    ):
        for sequence, values in ((7, [1, 2, 3]), (8, [10, 20])):
            total = 0
            for i, v in enumerate(values):
                total += v
                out = client.infer(
                    "accumulate",
                    [infer_input("INPUT__0", np.array([[v]], np.int32), "INT32")],
                    sequence_id=sequence,
                    sequence_start=i == 0,
                    sequence_end=i == len(values) - 1,
                )
                assert int(out.as_numpy("OUTPUT__0")[0, 0]) == total


@pytest.mark.parametrize("frontends", ["0", "2"])
def test_weight_sharing_and_worker_processes(tmp_path: Path, frontends: str) -> None:
    """ENABLE_WEIGHT_SHARING in one process; with --frontends 2 and instance workers each
    instance runs in a process of its own (nothing to share) and serves the same."""
    if FRONTENDS != "0":
        pytest.skip("names both layouts itself: run once, in test.sh's first pass")
    make_models("torch_models", tmp_path, "add_sub")
    _write(
        tmp_path,
        "add_sub",
        _config(
            "add_sub",
            *ADD_SUB_IO,
            max_batch_size=8,
            instance_count=2,
            extra='parameters: { key: "ENABLE_WEIGHT_SHARING" value: { string_value: "true" } }',
        ),
    )
    env = {"SERVICE_INSTANCE_WORKERS": "1"}
    with (
        running_server([tmp_path], ["--frontends", frontends], env=env) as server,
        grpcclient.InferenceServerClient(server.url) as client,
    ):
        _add_sub(client, "add_sub", rows=2)
        assert "Weight sharing is enabled for model instance 'add_sub'" in server.log
        reused = "Reusing TorchScript model for instance 'add_sub'" in server.log
        assert reused == (frontends == "0"), server.log
