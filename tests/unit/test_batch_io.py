"""Ragged batching as Triton's backends do it: batch inputs, flat ragged inputs, scattered
batch outputs (scheduling/batch_io.py), and the config checks with Triton's texts."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from google.protobuf import text_format

from inference import model_config_pb2 as mc
from service.backends.base import InstanceSpec
from service.errors import Internal, InvalidArgument
from service.repository.batch_config import check_batch_io
from service.repository.completion import (
    ModelSignature,
    check_against_signature,
    check_ragged_inputs,
)
from service.repository.config_file import ConfigError
from service.scheduling.base import Job
from service.scheduling.batch import merge_inputs, split_outputs
from service.scheduling.batch_io import BatchIO, batch_input_tensor
from service.scheduling.factory import create_scheduler
from service.scheduling.instances import InstancePool, InstanceWorker
from service.statistics import ModelStats
from service.types import TensorSpec

K = mc.BatchInput.Kind
F32, I32 = np.dtype(np.float32), np.dtype(np.int32)
#: qa/L0_batch_input's four requests: RAGGED_INPUT of shapes [1,2], [1,4], [1,1], [1,3].
QA_SHAPES = [(1, 2), (1, 4), (1, 1), (1, 3)]


def parse(text: str) -> mc.ModelConfig:
    return text_format.Parse(text, mc.ModelConfig())


RAGGED = parse(
    """
    name: "m" max_batch_size: 4
    input { name: "RAGGED_INPUT" data_type: TYPE_FP32 dims: [-1] allow_ragged_batch: true }
    input { name: "FIXED" data_type: TYPE_INT32 dims: [2] }
    output { name: "RAGGED_OUTPUT" data_type: TYPE_FP32 dims: [-1] }
    output { name: "SCATTERED" data_type: TYPE_FP32 dims: [-1] }
    batch_input { kind: BATCH_ELEMENT_COUNT target_name: "COUNT" data_type: TYPE_INT32
                  source_input: "RAGGED_INPUT" }
    batch_input { kind: BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO
                  target_name: ["OFFSETS", "OFFSETS_TOO"] data_type: TYPE_FP32
                  source_input: "RAGGED_INPUT" }
    batch_output { kind: BATCH_SCATTER_WITH_INPUT_SHAPE target_name: "SCATTERED"
                   source_input: "RAGGED_INPUT" }
    """
)


def job(width: int, outputs: tuple[str, ...] = ("RAGGED_OUTPUT", "SCATTERED")) -> Job:
    return Job(
        {
            "RAGGED_INPUT": np.full((1, width), width, np.float32),
            "FIXED": np.array([[width, -width]], np.int32),
        },
        list(outputs),
        1,
    )


# --- the batch input kinds, values as qa/L0_batch_input expects them -----------------------


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        (K.BATCH_ELEMENT_COUNT, [2, 4, 1, 3]),
        (K.BATCH_ACCUMULATED_ELEMENT_COUNT, [2, 6, 7, 10]),
        (K.BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO, [0, 2, 6, 7, 10]),
    ],
)
@pytest.mark.parametrize("dtype", [F32, I32])
def test_element_counts(kind: int, expected: list[int], dtype: np.dtype) -> None:
    tensor = batch_input_tensor(kind, dtype, QA_SHAPES)
    assert tensor.dtype == dtype
    assert tensor.tolist() == expected


def test_element_counts_take_the_whole_shape_batch_dimension_included() -> None:
    shapes = [(2, 3), (1, 2, 2)]
    assert batch_input_tensor(K.BATCH_ELEMENT_COUNT, I32, shapes).tolist() == [6, 4]


def test_max_element_count_is_only_a_shape() -> None:
    tensor = batch_input_tensor(K.BATCH_MAX_ELEMENT_COUNT_AS_SHAPE, F32, QA_SHAPES)
    assert tensor.shape == (4,)


def test_item_shape_has_a_row_per_batch_row() -> None:
    shapes = [(2, 1, 2), (1, 1, 2), (1, 2, 2)]
    tensor = batch_input_tensor(K.BATCH_ITEM_SHAPE, F32, shapes)
    assert tensor.shape == (4, 2)
    assert tensor.tolist() == [[1, 2], [1, 2], [1, 2], [2, 2]]


def test_item_shape_flatten() -> None:
    shapes = [(1, 4, 1), (1, 1, 2), (1, 1, 2), (1, 2, 2)]
    tensor = batch_input_tensor(K.BATCH_ITEM_SHAPE_FLATTEN, I32, shapes)
    assert tensor.dtype == I32
    assert tensor.tolist() == [4, 1, 1, 2, 1, 2, 2, 2]


# --- merging and splitting a batch ---------------------------------------------------------


def test_plain_configs_have_no_batch_io() -> None:
    plain = parse('name: "p" input { name: "X" data_type: TYPE_FP32 dims: [-1] }')
    assert BatchIO.of(plain) is None


def test_merge_flattens_ragged_inputs_and_adds_batch_inputs() -> None:
    io = BatchIO.of(RAGGED)
    assert io is not None
    merged = merge_inputs([job(2), job(4), job(1)], io)
    assert merged["RAGGED_INPUT"].tolist() == [2, 2, 4, 4, 4, 4, 1]
    assert merged["FIXED"].shape == (3, 2)  # the others are concatenated as ever
    assert merged["COUNT"].tolist() == [2, 4, 1]
    assert merged["COUNT"].dtype == I32
    assert merged["OFFSETS"].tolist() == [0, 2, 6, 7]
    assert merged["OFFSETS_TOO"] is merged["OFFSETS"]


def test_a_batch_of_one_is_flat_too() -> None:
    io = BatchIO.of(RAGGED)
    merged = merge_inputs([job(3)], io)
    assert merged["RAGGED_INPUT"].shape == (3,)
    assert merged["COUNT"].tolist() == [3]


def test_split_scatters_batch_outputs_by_input_shape() -> None:
    io = BatchIO.of(RAGGED)
    jobs = [job(2), job(4, ("SCATTERED",)), job(1, ("RAGGED_OUTPUT",))]
    results = {
        "RAGGED_OUTPUT": np.arange(12, dtype=np.float32).reshape(3, 4),
        "SCATTERED": np.arange(7, dtype=np.float32),
    }
    first, second, third = split_outputs(jobs, results, io)
    assert first["SCATTERED"].tolist() == [[0, 1]]
    assert first["RAGGED_OUTPUT"].tolist() == [[0, 1, 2, 3]]
    assert list(second) == ["SCATTERED"]
    assert second["SCATTERED"].tolist() == [[2, 3, 4, 5]]
    assert list(third) == ["RAGGED_OUTPUT"]  # its part of SCATTERED is skipped, not shifted
    assert third["RAGGED_OUTPUT"].tolist() == [[8, 9, 10, 11]]


def test_a_batch_output_too_short_for_the_requests_is_the_models_fault() -> None:
    io = BatchIO.of(RAGGED)
    results = {"RAGGED_OUTPUT": np.zeros((2, 1)), "SCATTERED": np.zeros(5, np.float32)}
    with pytest.raises(Internal, match="output 'SCATTERED' has 5 elements"):
        split_outputs([job(2), job(4)], results, io)


def test_a_missing_source_input_fails_the_batch() -> None:
    io = BatchIO.of(RAGGED)
    lacking = Job({"FIXED": np.zeros((1, 2), np.int32)}, [], 1)
    with pytest.raises(InvalidArgument, match="needs input 'RAGGED_INPUT'"):
        merge_inputs([job(2), lacking], io)


# --- config checks: core's ValidateBatchIO ---------------------------------------------------


BASE = """
name: "bad"
max_batch_size: 4
input { name: "IN" data_type: TYPE_FP32 dims: [-1] }
output { name: "OUT" data_type: TYPE_FP32 dims: [-1] }
"""


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            'batch_input { target_name: "B" data_type: TYPE_FP32 }',
            "batch input kind 'BATCH_ELEMENT_COUNT' expects 1 source input, got 0 for bad",
        ),
        (
            'batch_input { kind: BATCH_ITEM_SHAPE target_name: "B" data_type: TYPE_FP32 '
            'source_input: ["IN", "IN"] }',
            "batch input kind 'BATCH_ITEM_SHAPE' expects 1 source input, got 2 for bad",
        ),
        (
            'batch_input { target_name: "B" data_type: TYPE_INT64 source_input: "IN" }',
            "batch input data type must be TYPE_INT32 or TYPE_FP32 for bad",
        ),
        (
            'batch_input { target_name: "B" data_type: TYPE_INT32 source_input: "NOPE" }',
            "unknown source input name 'NOPE' for bad",
        ),
        (
            'batch_output { target_name: "OUT" }',
            "batch output kind 'BATCH_SCATTER_WITH_INPUT_SHAPE' expects 1 source input, "
            "got 0 for bad",
        ),
        (
            'batch_output { target_name: "OUT" source_input: "NOPE" }',
            "unknown source input name 'NOPE' for bad",
        ),
        (
            'batch_output { target_name: "NOPE" source_input: "IN" }',
            "unknown target output name 'NOPE' for bad",
        ),
        (
            'batch_output { target_name: ["OUT", "OUT"] source_input: "IN" }',
            "target output name 'OUT' can only be specified once for bad",
        ),
    ],
)
def test_triton_refuses_bad_batch_io(extra: str, message: str) -> None:
    with pytest.raises(ConfigError) as refused:
        check_batch_io(parse(BASE + extra))
    assert str(refused.value) == message


def test_unknown_kinds_are_refused() -> None:
    config = parse(
        BASE + 'batch_input { target_name: "B" data_type: TYPE_FP32 source_input: "IN" }'
    )
    config.batch_input[0].kind = 42  # type: ignore[assignment]
    with pytest.raises(ConfigError, match=r"^unknown batch input kind '' for bad$"):
        check_batch_io(config)


def test_good_batch_io_passes() -> None:
    check_batch_io(RAGGED)


# --- against the model file: ragged inputs are [-1], batch tensors are the server's ------------


def signature(ragged_shape: tuple[int, ...]) -> ModelSignature:
    return ModelSignature(
        inputs=[
            TensorSpec("RAGGED_INPUT", "FP32", ragged_shape),
            TensorSpec("FIXED", "INT32", (-1, 2)),
            TensorSpec("COUNT", "INT32", (-1,)),
            TensorSpec("OFFSETS", "FP32", (-1,)),
            TensorSpec("OFFSETS_TOO", "FP32", (-1,)),
        ],
        outputs=[
            TensorSpec("RAGGED_OUTPUT", "FP32", (-1, -1)),
            TensorSpec("SCATTERED", "FP32", (-1,)),
        ],
    )


def test_batch_inputs_and_outputs_fit_the_model_file() -> None:
    check_against_signature(RAGGED, signature((-1,)))
    check_ragged_inputs(RAGGED, signature((-1,)))


def test_a_ragged_input_must_be_flat_in_the_model() -> None:
    with pytest.raises(ConfigError) as refused:
        check_ragged_inputs(RAGGED, signature((-1, -1)))
    assert str(refused.value) == (
        "unable to load model 'm', configuration expects model provides input with shape "
        "[-1]  for ragged input 'RAGGED_INPUT', model provides [-1,-1]"
    )


class _Tensor:
    """A tensor-backend instance that is never run."""

    spec = InstanceSpec("t_0", "KIND_CPU", 0, 1)

    def signature(self) -> ModelSignature:
        raise NotImplementedError

    def execute(self, inputs: Any, outputs: Any) -> dict[str, Any]:
        raise NotImplementedError

    def close(self) -> None:
        pass


def test_sequence_batching_with_batch_io_is_refused_for_tensor_backends() -> None:
    config = mc.ModelConfig()
    config.CopyFrom(RAGGED)
    config.sequence_batching.SetInParent()
    pool = InstancePool([InstanceWorker(_Tensor())])
    with pytest.raises(ValueError, match="not supported with sequence_batching"):
        create_scheduler(config, pool, ModelStats())
