"""A repository of valid and broken models side by side, version policies, auto-complete and
the GPU-to-CPU fallback, all through a real server.

Broken models must not take the server down: they are reported not ready, and asking for
them gives UNAVAILABLE with the reason the load failed.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import models
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from integration_support import add_sub_inputs, assert_add_sub_serves, expect_error, running_server
from server_process import SERVICE_PYTHON, ServerProcess
from tritonclient.grpc import model_config_pb2 as mc

ADD_SUB_IO = (
    [("INPUT0", "FP32", [-1]), ("INPUT1", "FP32", [-1])],
    [("OUTPUT0", "FP32", [-1]), ("OUTPUT1", "FP32", [-1])],
)

# model name -> a fragment of the reason it is unavailable
BROKEN = {
    "bad_config": "failed to parse config.pbtxt",
    "garbage_onnx": "onnxruntime failed to load 'model.onnx'",
    "missing_input": "unexpected input 'INPUTX' in config, the model's inputs are: INPUT0, INPUT1",
    "wrong_dtype": "input 'INPUT0' has data type INT32 in config, but the model declares FP32",
    "no_versions": "at least one version must be available under the version policy of model "
    "'no_versions'",
    "name_mismatch": "unexpected 'name' in config.pbtxt: expected 'name_mismatch', "
    "got 'other_name'",
    "bad_accelerator": "unknown Execution Accelerator 'mkldnn' is requested",
}


def _add_sub_config(name: str, extra: str = "", **kwargs: object) -> str:
    return models.make_config(name, *ADD_SUB_IO, max_batch_size=8, extra=extra, **kwargs)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("mixed_repo")
    add_sub = models.add_sub_model()

    models.write_model(repo, "good", add_sub, _add_sub_config("good"))

    models.write_model(
        repo, "bad_config", add_sub, 'name: "bad_config"\nmax_batch_size: [ oops\ninput {\n'
    )
    models.write_model(
        repo,
        "garbage_onnx",
        b"\x00this is not an onnx model\xff" * 8,
        _add_sub_config("garbage_onnx"),
    )
    models.write_model(
        repo,
        "missing_input",
        add_sub,
        models.make_config(
            "missing_input",
            [("INPUT0", "FP32", [-1]), ("INPUTX", "FP32", [-1])],
            ADD_SUB_IO[1],
            max_batch_size=8,
        ),
    )
    models.write_model(
        repo,
        "wrong_dtype",
        add_sub,
        models.make_config(
            "wrong_dtype",
            [("INPUT0", "INT32", [-1]), ("INPUT1", "FP32", [-1])],
            ADD_SUB_IO[1],
            max_batch_size=8,
        ),
    )
    (repo / "no_versions").mkdir()
    (repo / "no_versions" / "config.pbtxt").write_text(_add_sub_config("no_versions"))
    models.write_model(repo, "name_mismatch", add_sub, _add_sub_config("other_name"))

    policies = {
        "vp_latest": "version_policy: { latest: { num_versions: 2 } }",
        "vp_all": "version_policy: { all: { } }",
        "vp_specific": "version_policy: { specific: { versions: [ 1, 3 ] } }",
        "vp_default": "",
    }
    for name, policy in policies.items():
        for version in (1, 2, 3):
            models.write_model(repo, name, add_sub, _add_sub_config(name, policy), version)

    # The policy names version 1, which has no folder (L0_lifecycle's test_file_override
    # repository): Triton loads version 3 and logs the missing one.
    specific = "version_policy: { specific: { versions: [ 1, 3 ] } }"
    for version in (2, 3):
        models.write_model(
            repo,
            "vp_specific_missing",
            add_sub,
            _add_sub_config("vp_specific_missing", specific),
            version,
        )

    # No config.pbtxt at all: everything comes from the ONNX file (batch dim symbolic).
    models.write_model(repo, "auto", add_sub, None)

    models.write_model(
        repo, "gpu_model", add_sub, _add_sub_config("gpu_model", instance_kind="KIND_GPU")
    )
    accelerator = (
        'optimization { execution_accelerators { cpu_execution_accelerator [{ name: "mkldnn" }] } }'
    )
    models.write_model(
        repo, "bad_accelerator", add_sub, _add_sub_config("bad_accelerator", accelerator)
    )
    return repo


@pytest.fixture(scope="module")
def server(repository: Path) -> Iterator[ServerProcess]:
    with running_server([repository], ["--strict-readiness=false", "--exit-on-error=false"]) as s:
        yield s


@pytest.fixture(scope="module")
def client(server: ServerProcess) -> Iterator[grpcclient.InferenceServerClient]:
    with grpcclient.InferenceServerClient(server.url) as c:
        yield c


def _check_add_sub(result: grpcclient.InferResult, a: np.ndarray, b: np.ndarray) -> None:
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)


A = np.array([[1.0, 2.0, 3.0], [-4.0, 0.5, 8.0]], dtype=np.float32)
B = np.array([[0.5, 0.5, 0.5], [1.0, 2.0, 3.0]], dtype=np.float32)


# --- server and valid model ------------------------------------------------------------


def test_server_up_despite_broken_models(client: grpcclient.InferenceServerClient) -> None:
    assert client.is_server_live() is True
    # --strict-readiness=false: ready although some models are unavailable.
    assert client.is_server_ready() is True


def test_valid_model_ready_and_serves(client: grpcclient.InferenceServerClient) -> None:
    assert client.is_model_ready("good") is True
    meta = client.get_model_metadata("good")
    assert (meta.name, list(meta.versions), meta.platform) == ("good", ["1"], "onnxruntime_onnx")
    result = client.infer("good", add_sub_inputs(A, B))
    assert result.get_response().model_version == "1"
    _check_add_sub(result, A, B)


def test_strict_readiness_not_ready_with_unavailable_models(repository: Path) -> None:
    # Strict readiness is the default.
    with (
        running_server([repository], ["--exit-on-error=false"]) as strict,
        grpcclient.InferenceServerClient(strict.url) as c,
    ):
        assert c.is_server_live() is True
        assert c.is_server_ready() is False
        # Not ready as a whole, yet the valid models still serve.
        assert c.is_model_ready("good") is True
        assert_add_sub_serves(c, "good")


# --- broken models -----------------------------------------------------------------------


def _index_reasons(client: grpcclient.InferenceServerClient, model: str) -> list[tuple[str, str]]:
    index = client.get_model_repository_index(as_json=True).get("models", [])
    return [
        (str(entry.get("version", "")), str(entry.get("reason", "")))
        for entry in index
        if entry["name"] == model
    ]


@pytest.mark.parametrize("model", list(BROKEN))
def test_broken_model_unavailable_with_reason(
    client: grpcclient.InferenceServerClient, model: str
) -> None:
    """As Triton 2.51 (reference): asked for its latest version, a model with none ready
    is NOT_FOUND; why it failed is in the repository index (and the log)."""
    assert client.is_model_ready(model) is False
    text = f"Request for unknown model: '{model}' has no available versions"
    for call in (
        lambda: client.get_model_metadata(model),
        lambda: client.get_model_config(model),
        lambda: client.infer(model, add_sub_inputs(A, B)),
    ):
        error = expect_error(call, "NOT_FOUND")
        assert error.message() == text, error.message()
    reasons = _index_reasons(client, model)
    if model == "no_versions":  # Triton's index lists no state of a model without versions
        assert reasons == [], reasons
    else:
        assert any(BROKEN[model] in reason for _, reason in reasons), reasons
    # ...and the valid model next to it keeps serving.
    assert_add_sub_serves(client, "good")


@pytest.mark.parametrize("model", ["garbage_onnx", "missing_input", "wrong_dtype"])
def test_broken_version_names_the_version(
    client: grpcclient.InferenceServerClient, model: str
) -> None:
    """A failed version folder (not the config) is listed by version in the index; asked
    for by number, it is UNAVAILABLE, not at ready state (Triton's GetModel)."""
    error = expect_error(lambda: client.get_model_metadata(model, "1"), "UNAVAILABLE")
    assert (
        error.message() == f"Request for unknown model: '{model}' version 1 is not at ready state"
    )
    [(version, reason)] = _index_reasons(client, model)
    assert version == "1" and BROKEN[model] in reason


def test_name_mismatch_not_served_under_either_name(
    client: grpcclient.InferenceServerClient,
) -> None:
    expect_error(
        lambda: client.get_model_metadata("other_name"),
        "NOT_FOUND",
        "Request for unknown model: 'other_name' is not found",
    )


def test_broken_models_logged(server: ServerProcess) -> None:
    for model, reason in BROKEN.items():
        assert f"'{model}'" in server.log
        assert reason in server.log, f"{model}: {reason!r} not in log"


# --- version policies ----------------------------------------------------------------------

POLICY_VERSIONS = {
    "vp_latest": ["2", "3"],
    "vp_all": ["1", "2", "3"],
    "vp_specific": ["1", "3"],
    "vp_default": ["3"],  # no policy: latest { num_versions: 1 }
    "vp_specific_missing": ["3"],  # version 1 has no folder, version 2 is not named
}


@pytest.mark.parametrize("model", list(POLICY_VERSIONS))
def test_version_policy(client: grpcclient.InferenceServerClient, model: str) -> None:
    served = POLICY_VERSIONS[model]
    assert list(client.get_model_metadata(model).versions) == served
    assert client.is_model_ready(model) is True
    for version in ("1", "2", "3"):
        ready = client.is_model_ready(model, version)
        assert ready is (version in served), (model, version)
        if version in served:
            result = client.infer(model, add_sub_inputs(A, B), model_version=version)
            assert result.get_response().model_version == version
            _check_add_sub(result, A, B)
            assert list(client.get_model_metadata(model, version).versions) == served
        else:
            message = f"Request for unknown model: '{model}' version {version} is not found"
            expect_error(
                lambda v=version: client.infer(model, add_sub_inputs(A, B), model_version=v),
                "NOT_FOUND",
                message,
            )
            expect_error(
                lambda v=version: client.get_model_metadata(model, v), "NOT_FOUND", message
            )
    # No version asked for: the highest served one answers.
    result = client.infer(model, add_sub_inputs(A, B), model_version="")
    assert result.get_response().model_version == served[-1]
    _check_add_sub(result, A, B)


def test_version_policy_missing_folder_is_logged(server: ServerProcess) -> None:
    assert (
        "version 1 is specified for model 'vp_specific_missing', but the version directory "
        "is not present" in server.log
    )


# --- auto-complete without config.pbtxt ------------------------------------------------------


def test_auto_complete_without_config(client: grpcclient.InferenceServerClient) -> None:
    assert client.is_model_ready("auto") is True
    config = client.get_model_config("auto").config
    assert config.name == "auto"
    assert config.platform == "onnxruntime_onnx"
    assert config.backend == "onnxruntime"
    assert config.max_batch_size == 4
    assert [(t.name, mc.DataType.Name(t.data_type), list(t.dims)) for t in config.input] == [
        ("INPUT0", "TYPE_FP32", [-1]),
        ("INPUT1", "TYPE_FP32", [-1]),
    ]
    assert [(t.name, mc.DataType.Name(t.data_type), list(t.dims)) for t in config.output] == [
        ("OUTPUT0", "TYPE_FP32", [-1]),
        ("OUTPUT1", "TYPE_FP32", [-1]),
    ]
    meta = client.get_model_metadata("auto")
    assert meta.platform == "onnxruntime_onnx"
    assert [(t.name, t.datatype, list(t.shape)) for t in meta.inputs] == [
        ("INPUT0", "FP32", [-1, -1]),
        ("INPUT1", "FP32", [-1, -1]),
    ]
    four_a, four_b = np.tile(A, (2, 1)), np.tile(B, (2, 1))
    _check_add_sub(client.infer("auto", add_sub_inputs(four_a, four_b)), four_a, four_b)
    five = np.ones((5, 2), dtype=np.float32)
    expect_error(
        lambda: client.infer("auto", add_sub_inputs(five, five)),
        "INVALID_ARGUMENT",
        "[request id: <id_unknown>] inference request batch-size must be <= 4 for 'auto'",
    )


# --- KIND_GPU on a machine without a GPU -----------------------------------------------------


_SUPPORTED_GPUS = "from service.gpus import inventory; print(inventory().supported())"


def _server_sees_gpu() -> bool:
    out = subprocess.run(
        [
            SERVICE_PYTHON,
            "-c",
            "from service.gpus import inventory; print(inventory().supported())",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    return out.strip() != "[]"


def test_gpu_instance_without_gpu_is_unavailable_with_tritons_reason(
    client: grpcclient.InferenceServerClient,
) -> None:
    """Triton refuses a KIND_GPU group when no GPU is there (no silent CPU run); KIND_AUTO,
    the default, becomes KIND_CPU."""
    if _server_sees_gpu():
        pytest.skip("this machine has a GPU: the gpu-marked tests cover KIND_GPU here")
    assert client.is_model_ready("gpu_model") is False
    expect_error(lambda: client.infer("gpu_model", add_sub_inputs(A, B)), "NOT_FOUND")
    refused = (
        "instance group gpu_model_0 of model gpu_model has kind KIND_GPU but no GPUs are available"
    )
    assert any(refused in reason for _, reason in _index_reasons(client, "gpu_model"))
    config = client.get_model_config("good").config
    assert [mc.ModelInstanceGroup.Kind.Name(g.kind) for g in config.instance_group] == ["KIND_CPU"]


# --- --exit-on-error (Triton's start-up rule) -------------------------------------------------

FAILED_TO_START = "error: creating server: Internal - failed to load all models"


def test_a_model_that_fails_to_load_ends_the_start(repository: Path) -> None:
    """--exit-on-error is true by default, as Triton's: the start-up table (naming the failed
    models), then Triton's line, exit code 1; nothing is left serving."""
    with pytest.raises(RuntimeError) as info:
        ServerProcess([repository]).start()
    text = str(info.value)
    assert "exited with 1" in text, text
    assert FAILED_TO_START in text, text
    assert "garbage_onnx" in text and "UNAVAILABLE" in text, text


def test_exit_on_error_false_logs_and_serves(repository: Path) -> None:
    with running_server([repository], ["--exit-on-error=false"]) as server:
        assert "Internal: failed to load all models" in server.log
        assert FAILED_TO_START not in server.log


def test_explicit_mode_start_fails_only_on_the_models_it_loads(repository: Path) -> None:
    """Explicit mode: only the --load-model models count (and the repository's broken
    models, never loaded, do not)."""
    explicit = ["--model-control-mode", "explicit"]
    with pytest.raises(RuntimeError) as info:
        ServerProcess([repository], [*explicit, "--load-model", "garbage_onnx"]).start()
    assert FAILED_TO_START in str(info.value)
    with (
        running_server([repository], [*explicit, "--load-model", "vp_all"]) as server,
        grpcclient.InferenceServerClient(server.url) as c,
    ):
        assert c.is_server_ready()
        assert c.is_model_ready("vp_all")
