"""The TensorFlow SavedModel backend (``platform: "tensorflow_savedmodel"``) through
tritonclient, on one server: auto-complete from the serving signature (names are the
signature keys, max_batch_size Triton's default), dynamic batching over two instances,
BYTES, TF_SIGNATURE_DEF, the fallback to another signature when ``serving_default`` is
absent (Triton's warning) and the load errors' texts. Models are saved at test time by
tests/framework_models/tf_models.py (TensorFlow imports take seconds: one server only).
"""

from __future__ import annotations

import concurrent.futures
from pathlib import Path

import models
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from framework_support import make_models, need_framework
from integration_support import add_sub_inputs, bytes_array, infer_input, running_server


@pytest.fixture
def _tensorflow() -> None:
    need_framework("tensorflow", "tensorflow")


def _write(root: Path, name: str, config: str) -> None:
    (root / name / "config.pbtxt").write_text(config)


def _config(name: str, inputs: list, outputs: list, **kwargs: object) -> str:
    return models.make_config(name, inputs, outputs, platform="tensorflow_savedmodel", **kwargs)  # type: ignore[arg-type]


def _reasons(client: grpcclient.InferenceServerClient) -> dict[str, str]:
    return {m.name: str(m.reason) for m in client.get_model_repository_index().models}


def _add_sub(client: grpcclient.InferenceServerClient, model: str, rows: int) -> None:
    a = np.arange(4 * rows, dtype=np.float32).reshape(rows, 4)
    b = np.full((rows, 4), 2.0, dtype=np.float32)
    result = client.infer(model, add_sub_inputs(a, b))
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)


@pytest.mark.usefixtures("_tensorflow")
def test_savedmodels_served_as_triton_maps_them(tmp_path: Path) -> None:
    make_models(
        "tf_models",
        tmp_path,
        "auto:add_sub",
        "batched:add_sub",
        "strings",
        "scale",
        "other:predict_only",
        "bad_sig:scale",
        "bad_type:add_sub",
    )
    # "auto" has no config.pbtxt: the backend is guessed from model.savedmodel and the
    # config completed from the serving signature.
    io = ([("INPUT0", "FP32", [4]), ("INPUT1", "FP32", [4])],)
    outputs = [("OUTPUT0", "FP32", [4]), ("OUTPUT1", "FP32", [4])]
    _write(
        tmp_path,
        "batched",
        _config(
            "batched",
            *io,
            outputs,
            max_batch_size=8,
            instance_count=2,
            extra="dynamic_batching { max_queue_delay_microseconds: 20000 }",
        ),
    )
    _write(tmp_path, "strings", _config("strings", [("TEXT", "BYTES", [2])], [], max_batch_size=4))
    triple = 'parameters: { key: "TF_SIGNATURE_DEF" value: { string_value: "triple" } }'
    _write(tmp_path, "scale", _config("scale", [("X", "INT32", [3])], [], extra=triple))
    nope = 'parameters: { key: "TF_SIGNATURE_DEF" value: { string_value: "nope" } }'
    _write(tmp_path, "bad_sig", _config("bad_sig", [], [], extra=nope))
    _write(
        tmp_path, "bad_type", _config("bad_type", [("INPUT0", "INT32", [4])], [], max_batch_size=4)
    )
    with (
        running_server([tmp_path], ["--exit-on-error=false"]) as server,
        grpcclient.InferenceServerClient(server.url) as client,
    ):
        auto = client.get_model_config("auto").config
        assert auto.platform == "tensorflow_savedmodel" and auto.backend == "tensorflow"
        assert auto.max_batch_size == 4
        assert [(t.name, list(t.dims)) for t in auto.input] == [("INPUT0", [4]), ("INPUT1", [4])]
        assert sorted(t.name for t in auto.output) == ["OUTPUT0", "OUTPUT1"]
        _add_sub(client, "auto", rows=3)

        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda _: _add_sub(client, "batched", 1), range(16)))
        stats = client.get_inference_statistics("batched").model_stats[0]
        assert stats.inference_count == 16
        assert stats.execution_count < 16  # some of the concurrent requests were merged

        text = bytes_array(["ab", "cd", "ef", "gh"]).reshape(2, 2)
        out = client.infer("strings", [infer_input("TEXT", text, "BYTES")])
        assert out.as_numpy("UPPER").tolist() == [[b"AB", b"CD"], [b"EF", b"GH"]]

        x = np.array([1, 2, 3], dtype=np.int32)
        out = client.infer("scale", [infer_input("X", x, "INT32")])
        np.testing.assert_array_equal(out.as_numpy("Y"), x * 3)
        out = client.infer("other", [infer_input("X", x, "INT32")])
        np.testing.assert_array_equal(out.as_numpy("Y"), x * 2)
        assert "unable to find serving signature 'serving_default" in server.log
        assert "using signature 'predict'" in server.log

        reasons = _reasons(client)
    assert "unable to load model 'bad_sig', expected 'nope' signature" in reasons["bad_sig"]
    assert (
        "unable to load model 'bad_type', configuration expects datatype TYPE_INT32 for input "
        "'INPUT0', model provides TYPE_FP32" in reasons["bad_type"]
    )
