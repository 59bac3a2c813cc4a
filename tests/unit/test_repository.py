"""service.repository: layout discovery, config reading, version policy, auto-complete."""

from __future__ import annotations

from pathlib import Path

import pytest
from google.protobuf import text_format

from inference import model_config_pb2 as mc
from service.errors import InvalidArgument
from service.repository.completion import (
    DEFAULT_MAX_BATCH_SIZE,
    ModelSignature,
    check_against_signature,
    complete,
)
from service.repository.config_file import ConfigError, read_config
from service.repository.layout import ModelDirectory, discover_models
from service.repository.load_parameters import config_override, file_contents
from service.repository.version_policy import missing_versions, select_versions
from service.types import TensorSpec


def _mkdirs(root: Path, *relative: str) -> None:
    for rel in relative:
        (root / rel).mkdir(parents=True, exist_ok=True)


def _config(text: str) -> mc.ModelConfig:
    return text_format.Parse(text, mc.ModelConfig())


def _policy(text: str) -> mc.ModelVersionPolicy:
    return text_format.Parse(text, mc.ModelVersionPolicy())


# --------------------------------------------------------------------------- discover_models


def test_discover_numeric_version_folders_only(tmp_path: Path) -> None:
    _mkdirs(tmp_path, "m/1", "m/3", "m/10", "m/v2", "m/abc", "m/.7", "m/-1", "m/2.0")
    (tmp_path / "m" / "5").write_text("a file, not a version folder")
    (tmp_path / "m" / "config.pbtxt").write_text("")
    found = discover_models([tmp_path])
    assert list(found) == ["m"]
    entry = found["m"]
    assert entry.versions == (1, 3, 10)  # numeric order, not lexical
    assert entry.error == ""
    assert entry.path == tmp_path / "m"
    assert entry.repository == tmp_path
    assert entry.config_path == tmp_path / "m" / "config.pbtxt"
    assert entry.version_path(10) == tmp_path / "m" / "10"


def test_discover_skips_hidden_dirs_and_files(tmp_path: Path) -> None:
    _mkdirs(tmp_path, ".git/1", ".ipynb_checkpoints", "b/1", "a")
    (tmp_path / "README.md").write_text("not a model")
    found = discover_models([tmp_path])
    assert sorted(found) == ["a", "b"]
    assert found["a"].versions == ()
    assert found["b"].versions == (1,)


def test_discover_superscript_digit_folder_is_not_a_version(tmp_path: Path) -> None:
    # "²".isdigit() is True but int("²") raises: such a stray folder must not crash discovery.
    _mkdirs(tmp_path, "m/1", "m/²")
    assert discover_models([tmp_path])["m"].versions == (1,)


def test_discover_merges_distinct_models_across_repositories(tmp_path: Path) -> None:
    repo_a, repo_b = tmp_path / "a", tmp_path / "b"
    _mkdirs(tmp_path, "a/one/1", "b/two/2")
    found = discover_models([repo_a, repo_b])
    assert sorted(found) == ["one", "two"]
    assert found["one"].repository == repo_a
    assert found["two"].repository == repo_b
    assert not found["one"].error and not found["two"].error


def test_discover_duplicate_name_across_repositories_is_an_error_entry(tmp_path: Path) -> None:
    repo_a, repo_b = tmp_path / "a", tmp_path / "b"
    _mkdirs(tmp_path, "a/dup/1", "b/dup/2", "b/other/1")
    found = discover_models([repo_a, repo_b])
    dup = found["dup"]
    assert dup.error == (f"model 'dup' appears in more than one repository: {repo_a} and {repo_b}")
    assert dup.duplicates == (repo_a / "dup", repo_b / "dup")
    assert dup.versions == ()
    assert found["other"].error == ""


# --------------------------------------------------------------------------- read_config


def _model_dir(root: Path, name: str = "m", config: str | None = None) -> ModelDirectory:
    _mkdirs(root, f"{name}/1")
    if config is not None:
        (root / name / "config.pbtxt").write_text(config, encoding="utf-8")
    return discover_models([root])[name]


def test_read_config_fills_name_from_folder(tmp_path: Path) -> None:
    config = read_config(_model_dir(tmp_path, "iris", 'platform: "onnxruntime_onnx"'))
    assert config.name == "iris"


def test_read_config_keeps_matching_name(tmp_path: Path) -> None:
    config = read_config(_model_dir(tmp_path, "iris", 'name: "iris" backend: "onnxruntime"'))
    assert config.name == "iris"


def test_read_config_name_mismatch(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        read_config(_model_dir(tmp_path, "iris", 'name: "other" backend: "onnxruntime"'))
    assert str(info.value) == ("unexpected 'name' in config.pbtxt: expected 'iris', got 'other'")


def test_read_config_parse_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        read_config(_model_dir(tmp_path, "m", "max_batch_size: lots\n"))
    message = str(info.value)
    assert message.startswith("failed to parse config.pbtxt: ")
    assert "max_batch_size" in message
    assert isinstance(info.value, ValueError)


def test_read_config_unknown_field_is_parse_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^failed to parse config\.pbtxt: .*no_such_field"):
        read_config(_model_dir(tmp_path, "m", "no_such_field: 1\n"))


def test_read_config_non_utf8_is_parse_error(tmp_path: Path) -> None:
    model = _model_dir(tmp_path, "m")
    model.config_path.write_bytes(b'name: "\xff\xfe"\n')
    with pytest.raises(ConfigError, match=r"^failed to parse config\.pbtxt: "):
        read_config(model)


@pytest.mark.parametrize(
    ("text", "platform", "backend", "filename"),
    [
        ('platform: "onnxruntime_onnx"', "onnxruntime_onnx", "onnxruntime", "model.onnx"),
        ('backend: "onnxruntime"', "onnxruntime_onnx", "onnxruntime", "model.onnx"),
        ('platform: "tensorrt_plan"', "tensorrt_plan", "tensorrt", "model.plan"),
        ('backend: "tensorrt"', "tensorrt_plan", "tensorrt", "model.plan"),
        ('backend: "python"', "", "python", "model.py"),
        ('backend: "pytorch"', "pytorch_libtorch", "pytorch", "model.pt"),
        # the PyTorch 2 python runtime looks for model.py, then model.pt (Triton's core)
        ('backend: "pytorch" runtime: "model.py"', "pytorch_libtorch", "pytorch", ""),
        (
            'platform: "onnxruntime_onnx" backend: "onnxruntime"',
            "onnxruntime_onnx",
            "onnxruntime",
            "model.onnx",
        ),
    ],
)
def test_read_config_settles_platform_and_backend(
    tmp_path: Path, text: str, platform: str, backend: str, filename: str
) -> None:
    config = read_config(_model_dir(tmp_path, "m", text))
    assert (config.platform, config.backend) == (platform, backend)
    assert config.default_model_filename == filename


def test_read_config_keeps_explicit_default_model_filename(tmp_path: Path) -> None:
    text = 'backend: "onnxruntime" default_model_filename: "net.onnx"'
    config = read_config(_model_dir(tmp_path, "m", text))
    assert config.default_model_filename == "net.onnx"


def test_read_config_unknown_backend_gets_no_default_filename(tmp_path: Path) -> None:
    config = read_config(_model_dir(tmp_path, "m", 'backend: "custom"'))
    assert config.backend == "custom"
    assert config.platform == ""
    assert config.default_model_filename == ""


def test_read_config_unknown_platform(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        read_config(_model_dir(tmp_path, "m", 'platform: "caffe2_netdef"'))
    assert str(info.value) == "unknown platform 'caffe2_netdef'"


def test_read_config_guesses_onnxruntime_without_config(tmp_path: Path) -> None:
    model = _model_dir(tmp_path, "auto")
    (model.version_path(1) / "model.onnx").write_bytes(b"")
    assert not model.config_path.exists()
    config = read_config(model)
    assert config.name == "auto"
    assert config.backend == "onnxruntime"
    assert config.platform == "onnxruntime_onnx"
    assert config.default_model_filename == "model.onnx"


def test_read_config_guesses_from_empty_config(tmp_path: Path) -> None:
    model = _model_dir(tmp_path, "auto", "max_batch_size: 2\n")
    (model.version_path(1) / "model.plan").write_bytes(b"")
    config = read_config(model)
    assert (config.backend, config.platform) == ("tensorrt", "tensorrt_plan")
    assert config.default_model_filename == "model.plan"
    assert config.max_batch_size == 2


def test_read_config_guesses_from_latest_version(tmp_path: Path) -> None:
    _mkdirs(tmp_path, "m/1", "m/2")
    (tmp_path / "m" / "1" / "model.plan").write_bytes(b"")
    (tmp_path / "m" / "2" / "model.onnx").write_bytes(b"")
    config = read_config(discover_models([tmp_path])["m"])
    assert config.backend == "onnxruntime"


def test_read_config_cannot_guess(tmp_path: Path) -> None:
    model = _model_dir(tmp_path, "m")
    (model.version_path(1) / "weights.bin").write_bytes(b"")
    with pytest.raises(ConfigError) as info:
        read_config(model)
    assert str(info.value) == (
        "unable to infer the backend: set 'backend' or 'platform' in config.pbtxt"
    )


# --------------------------------------------------------------------------- select_versions


def test_select_default_is_latest_one() -> None:
    assert select_versions(mc.ModelVersionPolicy(), [3, 1, 2]) == [3]


def test_select_default_with_no_versions_is_empty() -> None:
    assert select_versions(mc.ModelVersionPolicy(), []) == []


def test_select_latest_n() -> None:
    policy = _policy("latest { num_versions: 2 }")
    assert select_versions(policy, [5, 1, 10, 2]) == [5, 10]


def test_select_latest_more_than_available() -> None:
    policy = _policy("latest { num_versions: 5 }")
    assert select_versions(policy, [2, 1]) == [1, 2]


def test_select_all() -> None:
    assert select_versions(_policy("all { }"), [3, 1, 2]) == [1, 2, 3]


def test_select_specific() -> None:
    policy = _policy("specific { versions: [3, 1, 3] }")
    assert select_versions(policy, [1, 2, 3, 4]) == [1, 3]


def test_select_specific_missing_folder_loads_the_others() -> None:
    """Triton's core loads the named versions that have a folder and logs the others."""
    policy = _policy("specific { versions: [7, 1, 4, 7] }")
    assert select_versions(policy, [1, 2, 3]) == [1]
    assert missing_versions(policy, [1, 2, 3]) == [7, 4]


def test_select_specific_no_folder_at_all_is_empty() -> None:
    policy = _policy("specific { versions: [4] }")
    assert select_versions(policy, [1, 2]) == []
    assert missing_versions(policy, [1, 2]) == [4]


def test_missing_versions_only_for_specific() -> None:
    assert missing_versions(_policy("latest { num_versions: 3 }"), [1]) == []
    assert missing_versions(_policy("all { }"), []) == []


def test_select_latest_zero_is_refused() -> None:
    policy = _policy("latest { num_versions: 0 }")
    with pytest.raises(ValueError) as info:
        select_versions(policy, [1, 2])
    assert str(info.value) == "version_policy.latest.num_versions must be at least 1"


# --------------------------------------------------------------------------- completion


def _sig(
    inputs: list[tuple[str, str, tuple[int, ...]]], outputs: list[tuple[str, str, tuple[int, ...]]]
) -> ModelSignature:
    return ModelSignature(
        inputs=[TensorSpec(*t) for t in inputs], outputs=[TensorSpec(*t) for t in outputs]
    )


def _tensor_summary(tensors: object) -> list[tuple[str, str, list[int], list[int] | None]]:
    return [
        (
            t.name,
            mc.DataType.Name(t.data_type),
            list(t.dims),
            list(t.reshape.shape) if t.HasField("reshape") else None,
        )
        for t in tensors  # type: ignore[attr-defined]
    ]


def test_complete_batchable_signature_gets_default_max_batch_size() -> None:
    config = mc.ModelConfig(name="m")
    signature = _sig(
        [("INPUT0", "FP32", (-1, 4)), ("INPUT1", "BYTES", (-1, 2, -1))],
        [("OUTPUT0", "INT64", (-1, 3))],
    )
    complete(config, signature)
    assert DEFAULT_MAX_BATCH_SIZE == 4
    assert config.max_batch_size == 4
    assert _tensor_summary(config.input) == [
        ("INPUT0", "TYPE_FP32", [4], None),
        ("INPUT1", "TYPE_STRING", [2, -1], None),
    ]
    assert _tensor_summary(config.output) == [("OUTPUT0", "TYPE_INT64", [3], None)]
    check_against_signature(config, signature)  # the completed config is consistent


def test_complete_rank1_batched_tensor_gets_dims_1_and_empty_reshape() -> None:
    config = mc.ModelConfig(name="iris")
    signature = _sig(
        [("input", "FP32", (-1, 4))],
        [("label", "INT64", (-1,)), ("probabilities", "FP32", (-1, 3))],
    )
    complete(config, signature)
    assert config.max_batch_size == 4
    assert _tensor_summary(config.output) == [
        ("label", "TYPE_INT64", [1], []),
        ("probabilities", "TYPE_FP32", [3], None),
    ]
    check_against_signature(config, signature)


def test_complete_keeps_configured_max_batch_size() -> None:
    config = mc.ModelConfig(name="m", max_batch_size=16)
    complete(config, _sig([("X", "FP32", (-1, 4))], [("Y", "FP32", (-1, 4))]))
    assert config.max_batch_size == 16
    assert _tensor_summary(config.input) == [("X", "TYPE_FP32", [4], None)]


def test_complete_fixed_first_dim_is_not_batched() -> None:
    config = mc.ModelConfig(name="m")
    signature = _sig([("X", "FP32", (2, 4))], [("Y", "FP32", (-1, 4))])
    assert not signature.batchable
    complete(config, signature)
    assert config.max_batch_size == 0
    assert _tensor_summary(config.input) == [("X", "TYPE_FP32", [2, 4], None)]
    assert _tensor_summary(config.output) == [("Y", "TYPE_FP32", [-1, 4], None)]


def test_complete_scalar_unbatched_tensor() -> None:
    config = mc.ModelConfig(name="m")
    signature = _sig([("X", "FP32", ())], [("Y", "FP32", ())])
    assert not signature.batchable
    complete(config, signature)
    assert config.max_batch_size == 0
    assert _tensor_summary(config.input) == [("X", "TYPE_FP32", [1], [])]


def test_complete_empty_signature_is_not_batchable() -> None:
    assert not ModelSignature(inputs=[], outputs=[]).batchable


def test_complete_does_not_batch_a_config_that_lists_inputs() -> None:
    config = _config('name: "m" input [{ name: "X" data_type: TYPE_FP32 dims: [-1, 4] }]')
    complete(config, _sig([("X", "FP32", (-1, 4))], [("Y", "FP32", (-1, 4))]))
    assert config.max_batch_size == 0
    assert _tensor_summary(config.input) == [("X", "TYPE_FP32", [-1, 4], None)]
    # outputs were missing, so they are filled with full (unbatched) shapes
    assert _tensor_summary(config.output) == [("Y", "TYPE_FP32", [-1, 4], None)]


def test_complete_keeps_configured_outputs() -> None:
    config = _config(
        'name: "m" max_batch_size: 2 output [{ name: "Y" data_type: TYPE_FP32 dims: [4] }]'
    )
    complete(config, _sig([("X", "FP32", (-1, 4))], [("Y", "FP32", (-1, 4)), ("Z", "FP32", (-1,))]))
    assert [t.name for t in config.output] == ["Y"]
    assert _tensor_summary(config.input) == [("X", "TYPE_FP32", [4], None)]


# ------------------------------------------------------------------------- check_against_signature

_SIGNATURE = _sig(
    [("INPUT0", "FP32", (-1, 4)), ("INPUT1", "FP32", (-1, 4))],
    [("OUTPUT0", "FP32", (-1, 4))],
)


def _check(text: str, signature: ModelSignature = _SIGNATURE) -> None:
    check_against_signature(_config(text), signature)


_GOOD = """
max_batch_size: 8
input [
  { name: "INPUT0" data_type: TYPE_FP32 dims: [4] },
  { name: "INPUT1" data_type: TYPE_FP32 dims: [-1] }
]
output [{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [4] }]
"""


def test_check_accepts_consistent_config() -> None:
    _check(_GOOD)


def test_check_accepts_config_listing_only_some_outputs() -> None:
    _check(_GOOD.replace('output [{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [4] }]', ""))


_SCALARS = _sig([("INPUT", "FP32", ())], [("OUTPUT", "FP32", ())])


@pytest.mark.parametrize(
    "dims",
    ["dims: [1]", "dims: [1, 1]", "dims: [-1] reshape: { shape: [1] }"],
)
def test_check_scalar_tensors_take_config_dims_of_ones(dims: str) -> None:
    """Triton's ONNX Runtime backend: a scalar's config dims (or reshape) are all 1."""
    _check(
        f'input [{{ name: "INPUT" data_type: TYPE_FP32 {dims} }}]\n'
        f'output [{{ name: "OUTPUT" data_type: TYPE_FP32 {dims} }}]',
        _SCALARS,
    )


@pytest.mark.parametrize(("kind", "dims"), [("input", "[2]"), ("output", "[1,3]")])
def test_check_scalar_tensor_with_a_dim_other_than_1(kind: str, dims: str) -> None:
    tensors = {"input": "dims: [1]", "output": "dims: [1]"}
    tensors[kind] = f"dims: {dims}"
    text = (
        f'name: "m"\ninput [{{ name: "INPUT" data_type: TYPE_FP32 {tensors["input"]} }}]\n'
        f'output [{{ name: "OUTPUT" data_type: TYPE_FP32 {tensors["output"]} }}]'
    )
    with pytest.raises(ConfigError) as info:
        _check(text, _SCALARS)
    assert str(info.value) == (
        f"unable to load model 'm', scalar tensor '{kind.upper()}', should only provide 1 in "
        "the model configuration when the model doesn't support batching. Model "
        f"configuration provided: {dims}."
    )


def test_check_scalar_datatype_still_checked() -> None:
    with pytest.raises(ConfigError) as info:
        _check(
            'input [{ name: "INPUT" data_type: TYPE_INT32 dims: [1] }]\n'
            'output [{ name: "OUTPUT" data_type: TYPE_FP32 dims: [1] }]',
            _SCALARS,
        )
    assert str(info.value) == (
        "input 'INPUT' has data type INT32 in config, but the model declares FP32"
    )


def test_check_datatype_mismatch() -> None:
    with pytest.raises(ConfigError) as info:
        _check(_GOOD.replace('"INPUT1" data_type: TYPE_FP32', '"INPUT1" data_type: TYPE_INT32'))
    assert str(info.value) == (
        "input 'INPUT1' has data type INT32 in config, but the model declares FP32"
    )


def test_check_string_datatype_named_bytes() -> None:
    with pytest.raises(ConfigError) as info:
        _check(_GOOD.replace('"OUTPUT0" data_type: TYPE_FP32', '"OUTPUT0" data_type: TYPE_STRING'))
    assert str(info.value) == (
        "output 'OUTPUT0' has data type BYTES in config, but the model declares FP32"
    )


def test_check_unknown_tensor() -> None:
    with pytest.raises(ConfigError) as info:
        _check(_GOOD.replace('name: "OUTPUT0"', 'name: "OUT"'))
    assert str(info.value) == "unexpected output 'OUT' in config, the model's outputs are: OUTPUT0"


def test_check_unknown_input_lists_model_inputs_sorted() -> None:
    with pytest.raises(ConfigError) as info:
        _check(_GOOD.replace('name: "INPUT0"', 'name: "EXTRA"'))
    assert str(info.value) == (
        "unexpected input 'EXTRA' in config, the model's inputs are: INPUT0, INPUT1"
    )


def test_check_missing_model_input() -> None:
    with pytest.raises(ConfigError) as info:
        _check('max_batch_size: 8 input [{ name: "INPUT1" data_type: TYPE_FP32 dims: [4] }]')
    assert str(info.value) == "model inputs missing from config: INPUT0"


def test_check_fixed_first_dim_with_batching() -> None:
    signature = _sig([("X", "FP32", (2, 4))], [])
    with pytest.raises(ConfigError) as info:
        _check('max_batch_size: 4 input [{ name: "X" data_type: TYPE_FP32 dims: [4] }]', signature)
    assert str(info.value) == (
        "input 'X': max_batch_size > 0 needs a dynamic first dimension, "
        "the model declares shape [2,4]"
    )


def test_check_fixed_first_dim_without_batching_is_fine() -> None:
    signature = _sig([("X", "FP32", (2, 4))], [])
    _check('max_batch_size: 0 input [{ name: "X" data_type: TYPE_FP32 dims: [2, 4] }]', signature)


def test_check_rank_mismatch_batched() -> None:
    with pytest.raises(ConfigError) as info:
        _check(_GOOD.replace("dims: [-1]", "dims: [2, 2]"))
    assert str(info.value) == (
        "input 'INPUT1' has 3 dimensions with max_batch_size > 0 in config, "
        "but the model declares shape [-1,4]"
    )


def test_check_rank_mismatch_unbatched() -> None:
    with pytest.raises(ConfigError) as info:
        _check(_GOOD.replace("max_batch_size: 8", "max_batch_size: 0"))
    assert str(info.value) == (
        "input 'INPUT0' has 1 dimensions with max_batch_size 0 in config, "
        "but the model declares shape [-1,4]"
    )


def test_check_dims_conflict() -> None:
    with pytest.raises(ConfigError) as info:
        _check(_GOOD.replace("dims: [4] },", "dims: [5] },"))
    assert str(info.value) == (
        "input 'INPUT0' has dims [-1,5] in config, but the model declares shape [-1,4]"
    )


def test_check_uses_reshape_instead_of_dims() -> None:
    reshaped = _GOOD.replace(
        '{ name: "INPUT0" data_type: TYPE_FP32 dims: [4] }',
        '{ name: "INPUT0" data_type: TYPE_FP32 dims: [2, 2] reshape: { shape: [4] } }',
    )
    _check(reshaped)  # dims [2,2] alone would be a rank mismatch with [-1,4]
    with pytest.raises(ConfigError, match=r"^input 'INPUT0' has 3 dimensions"):
        _check(_GOOD.replace("dims: [4] },", "dims: [2, 2] },"))


def test_check_reshape_contradicting_model() -> None:
    reshaped = _GOOD.replace(
        '{ name: "INPUT0" data_type: TYPE_FP32 dims: [4] }',
        '{ name: "INPUT0" data_type: TYPE_FP32 dims: [4] reshape: { shape: [2, 2] } }',
    )
    with pytest.raises(ConfigError) as info:
        _check(reshaped)
    assert str(info.value) == (
        "input 'INPUT0' has 3 dimensions with max_batch_size > 0 in config, "
        "but the model declares shape [-1,4]"
    )


def test_check_empty_reshape_for_rank1_batched_tensor() -> None:
    signature = _sig([("X", "FP32", (-1,))], [])
    _check(
        'max_batch_size: 4 input [{ name: "X" data_type: TYPE_FP32 dims: [1] '
        "reshape: { shape: [] } }]",
        signature,
    )


# --------------------------------------------------------------------------- load parameters


def test_config_override_parses_json_into_a_model_config() -> None:
    config = config_override("m", '{"name": "m", "max_batch_size": 4, "backend": "python"}')
    assert (config.name, config.max_batch_size, config.backend) == ("m", 4, "python")


def test_config_override_that_is_not_a_model_config() -> None:
    with pytest.raises(InvalidArgument) as info:
        config_override("m", '{"max_batch_size": "many"}')
    assert info.value.message.startswith(
        "failed to load 'm': parameter 'config' is not a valid ModelConfig: "
    )


def test_config_override_takes_a_lone_value_of_a_repeated_field_as_a_list() -> None:
    """As protobuf's C++ JSON parser (Triton's): L0_lifecycle's
    test_concurrent_model_instance_load_sanity sends instance_group as one object."""
    text = (
        '{"instance_group": {"kind": "KIND_CPU", "count": 5}, "max_batch_size": 0,'
        ' "sequence_batching": {"direct": {}, "control_input": {"name": "START"}},'
        ' "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [-1, 16]}],'
        ' "parameters": {"k": {"string_value": "v"}}}'
    )
    config = config_override("m", text)
    groups = [(g.kind, g.count) for g in config.instance_group]
    assert groups == [(mc.ModelInstanceGroup.KIND_CPU, 5)]
    assert [c.name for c in config.sequence_batching.control_input] == ["START"]
    assert list(config.input[0].dims) == [-1, 16]
    assert config.parameters["k"].string_value == "v"


def test_config_override_lone_value_of_the_wrong_kind_keeps_the_first_error() -> None:
    with pytest.raises(InvalidArgument) as info:
        config_override("m", '{"instance_group": 3}')
    assert info.value.message == (
        "failed to load 'm': parameter 'config' is not a valid ModelConfig: Failed to parse "
        "instance_group field: repeated field instance_group must be in [] which is 3 at "
        "ModelConfig."
    )


def test_file_contents_keeps_the_file_parameters_by_their_path() -> None:
    given = {"file:1/model.py": b"x", "config": b"{}", "file:2/a/b.txt": b"y"}
    assert file_contents(given) == {"1/model.py": b"x", "2/a/b.txt": b"y"}
