"""Config bounds and model file names (service/repository/limits.py), directly and through a
load: a hostile config fails at once with the limit named, and nothing is built."""

from __future__ import annotations

from pathlib import Path

import models
import pytest
from google.protobuf import text_format

from inference import model_config_pb2 as mc
from service.core.lifecycle import ControlMode, ModelManager
from service.errors import InvalidArgument
from service.repository.config_file import ConfigError
from service.repository.limits import (
    MAX_RANK,
    MAX_SEQUENCE_SLOTS,
    MAX_STATE_ELEMENTS,
    ConfigLimits,
    check_config,
    load_refusal,
)

ADD_SUB = """
name: "m" backend: "onnxruntime" max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] },
        { name: "INPUT1" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] },
         { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ -1 ] } ]
"""


def config(extra: str = "", base: str = ADD_SUB) -> mc.ModelConfig:
    return text_format.Merge(base + extra, mc.ModelConfig())  # Merge: a field set twice wins


def refused(cfg: mc.ModelConfig, limits: ConfigLimits | None = None) -> str:
    refusal = load_refusal(cfg, limits or ConfigLimits())
    assert refusal is not None
    return refusal


def accepted(cfg: mc.ModelConfig, limits: ConfigLimits | None = None) -> None:
    assert load_refusal(cfg, limits or ConfigLimits()) is None


def test_an_ordinary_config_passes() -> None:
    cfg = config('instance_group [ { count: 4 } ] default_model_filename: "m.onnx"')
    accepted(cfg)
    check_config(cfg)


def test_a_negative_max_batch_size_fails_where_triton_validates_configs() -> None:
    with pytest.raises(ConfigError, match="'max_batch_size' must be non-negative value for m"):
        check_config(config("max_batch_size: -1"))


# (case, extra config text, text the error must contain)
BAD_FIELDS = [
    (
        "instances",
        "instance_group [ { count: 100000 } ]",
        "instance_group of model 'm' asks for 100000 instances, more than the limit of 1024 "
        "(--max-instances-per-model)",
    ),
    (
        "instances-over-groups",
        "instance_group [ { count: 1000 }, { count: 25 } ]",
        "asks for 1025 instances",
    ),
    (
        "instances-per-gpu",
        "instance_group [ { count: 300 kind: KIND_GPU gpus: [ 0, 1, 2, 3 ] } ]",
        "asks for 1200 instances",
    ),
    (
        "zero-dim",
        'input [ { name: "X" data_type: TYPE_FP32 dims: [ 0 ] } ]',
        "model input 'X' dimension must be integer >= 1, or -1 to indicate a variable-size "
        "dimension",
    ),
    (
        "negative-reshape",
        'output [ { name: "Y" data_type: TYPE_FP32 dims: [ 4 ] reshape { shape: [ -2 ] } } ]',
        "model output 'Y' reshape dimensions must be integer >= 1",
    ),
    (
        "rank",
        f'input [ {{ name: "X" data_type: TYPE_FP32 dims: [ {", ".join(["1"] * 65)} ] }} ]',
        f"model input 'X' has 65 dimensions, more than the {MAX_RANK} a tensor can have",
    ),
    (
        "elements",
        'input [ { name: "X" data_type: TYPE_FP32 dims: [ 4294967296, 4294967296 ] } ]',
        "model input 'X' dims [4294967296, 4294967296] hold more than 2^63-1 elements",
    ),
    (
        "direct-slots",
        "max_batch_size: 2000000 sequence_batching { direct { } }",
        f"needs 2000000 sequence slots (1 instances x 2000000), more than the limit of "
        f"{MAX_SEQUENCE_SLOTS}",
    ),
    (
        "oldest-slots",
        "instance_group [ { count: 1000 } ] "
        "sequence_batching { oldest { max_candidate_sequences: 5000 } }",
        "needs 5000000 sequence slots (1000 instances x 5000)",
    ),
    (
        "state-elements",
        'sequence_batching { state [ { input_name: "S" output_name: "S_OUT" '
        "data_type: TYPE_FP32 dims: [ 65536, 65536 ] } ] }",
        f"sequence state 'S' of model 'm' holds 4294967296 elements per sequence, more than "
        f"the limit of {MAX_STATE_ELEMENTS}",
    ),
    (
        "initial-state-elements",
        'sequence_batching { state [ { input_name: "S" output_name: "S_OUT" '
        "data_type: TYPE_FP32 dims: [ -1 ] initial_state [ { data_type: TYPE_FP32 "
        'dims: [ 1000000000 ] zero_data: true name: "init" } ] } ] }',
        "holds 1000000000 elements per sequence",
    ),
    (
        "threads",
        'parameters { key: "intra_op_thread_count" value { string_value: "100000" } }',
        "parameter 'intra_op_thread_count' of model 'm' is 100000, outside the range 0..1024",
    ),
]


@pytest.mark.parametrize(
    ("extra", "message"), [c[1:] for c in BAD_FIELDS], ids=[c[0] for c in BAD_FIELDS]
)
def test_out_of_bounds_fields_are_refused(extra: str, message: str) -> None:
    assert message in refused(config(extra))


def test_the_instance_limit_follows_the_flag() -> None:
    two = ConfigLimits(max_instances=2)
    accepted(config("instance_group [ { count: 2 } ]"), two)
    assert "more than the limit of 2" in refused(config("instance_group [ { count: 3 } ]"), two)
    accepted(config("instance_group [ { count: 5000 } ]"), ConfigLimits(max_instances=5000))


@pytest.mark.parametrize(
    "name", ["/etc/passwd", "../../../model.onnx", "sub/../../model.onnx", "..\\x.onnx"]
)
def test_model_files_outside_the_version_folder_are_refused(name: str) -> None:
    message = refused(config(f'default_model_filename: "{name.replace(chr(92), chr(92) * 2)}"'))
    assert (
        f"default_model_filename '{name}' of model 'm' must name a file inside the version folder"
        in message
    )
    message = refused(
        config(f'cc_model_filenames {{ key: "7.5" value: "{name.replace(chr(92), chr(92) * 2)}" }}')
    )
    assert "cc_model_filenames['7.5']" in message


def test_model_files_in_subfolders_are_fine() -> None:
    accepted(config('default_model_filename: "weights/model.onnx"'))


async def test_a_hostile_load_fails_fast_and_builds_nothing(tmp_path: Path) -> None:
    """Was: ~85 MB/s of instances until memory ran out (the test would time out). Now
    refused before any instance is made."""
    onnx_bytes = models.add_sub_model().SerializeToString()
    outside = tmp_path / "outside.onnx"
    outside.write_bytes(onnx_bytes)
    repo = tmp_path / "repo"
    repo.mkdir()
    manager = ModelManager([repo], mode=ControlMode.EXPLICIT)
    await manager.start()
    try:
        with pytest.raises(InvalidArgument, match="more than the limit of 1024"):
            await manager.load(
                "m", config("instance_group [ { count: 100000 } ]"), {"1/model.onnx": onnx_bytes}
            )
        for name in (str(outside), "../../../../outside.onnx"):
            override = config(f'default_model_filename: "{name}"')
            with pytest.raises(InvalidArgument, match="must name a file inside the version"):
                await manager.load("m", override, {"1/model.onnx": onnx_bytes})
        assert manager.find("m") is None
        await manager.load("m", config(), {"1/model.onnx": onnx_bytes})
        assert manager.get("m").ready
    finally:
        await manager.unload_all()
