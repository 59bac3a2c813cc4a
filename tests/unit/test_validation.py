"""service.core.validation (prepare_job, build_outputs) and InferenceServer.infer's error prefix."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from google.protobuf import text_format

from inference import model_config_pb2 as mc
from service.core.inference_server import STOPPING, InferenceServer
from service.core.model import ModelState, ModelVersion, io_specs
from service.core.validation import build_outputs, prepare_job
from service.errors import (
    Internal,
    InvalidArgument,
    NotFound,
    ServerError,
    Unavailable,
)
from service.scheduling.base import ExecutionResult, Job
from service.statistics import BatchTimings
from service.types import InferRequest, InputTensor, RequestedOutput, UInt64
from wire import datatypes

BATCHED = """
name: "batched"
max_batch_size: 8
input [
  { name: "INPUT0" data_type: TYPE_FP32 dims: [4] },
  { name: "INPUT1" data_type: TYPE_INT32 dims: [2, 2] reshape: { shape: [4] } },
  { name: "OPT" data_type: TYPE_FP32 dims: [-1] optional: true }
]
output [
  { name: "OUTPUT0" data_type: TYPE_FP32 dims: [4] },
  { name: "OUTPUT1" data_type: TYPE_INT32 dims: [2, 2] reshape: { shape: [4] } },
  { name: "LABEL" data_type: TYPE_INT64 dims: [1] reshape: { shape: [] } }
]
"""

UNBATCHED = """
name: "plain"
max_batch_size: 0
input [
  { name: "TEXT" data_type: TYPE_STRING dims: [-1] },
  { name: "X" data_type: TYPE_BF16 dims: [2, -1] }
]
output [
  { name: "UPPER" data_type: TYPE_STRING dims: [-1] },
  { name: "Y" data_type: TYPE_BF16 dims: [2, -1] },
  { name: "S" data_type: TYPE_FP32 dims: [1] reshape: { shape: [] } }
]
"""


BATCH_NOTE = (
    "NOTE: Setting a non-zero max_batch_size in the model config requires a batch dimension "
    "to be prepended to each input shape. If you want to specify the full shape including the "
    "batch dim in your input dims config, try setting max_batch_size to zero. See the model "
    "configuration docs for more info on max_batch_size."
)


def make_version(text: str, scheduler: Any = None) -> ModelVersion:
    config = text_format.Parse(text, mc.ModelConfig())
    return ModelVersion(
        name=config.name,
        version=1,
        config=config,
        state=ModelState.READY,
        scheduler=scheduler,
        inputs=io_specs(list(config.input)),
        outputs=io_specs(list(config.output)),
    )


@pytest.fixture
def batched() -> ModelVersion:
    return make_version(BATCHED)


@pytest.fixture
def plain() -> ModelVersion:
    return make_version(UNBATCHED)


def fp32(name: str, values: Any, shape: Sequence[int] | None = None) -> InputTensor:
    array = np.asarray(values, dtype=np.float32)
    return InputTensor(
        name, "FP32", tuple(shape if shape is not None else array.shape), raw=array.tobytes()
    )


def int32(name: str, values: Any, shape: Sequence[int] | None = None) -> InputTensor:
    array = np.asarray(values, dtype=np.int32)
    return InputTensor(
        name, "INT32", tuple(shape if shape is not None else array.shape), raw=array.tobytes()
    )


def good_inputs(batch: int = 2) -> list[InputTensor]:
    return [
        fp32("INPUT0", np.arange(batch * 4).reshape(batch, 4)),
        int32("INPUT1", np.arange(batch * 4).reshape(batch, 2, 2)),
    ]


def request(inputs: list[InputTensor], outputs: Sequence[str] = (), **kw: Any) -> InferRequest:
    return InferRequest(
        model_name=kw.pop("model_name", "batched"),
        inputs=inputs,
        outputs=[RequestedOutput(n) for n in outputs],
        **kw,
    )


def error_of(model: ModelVersion, req: InferRequest) -> str:
    with pytest.raises(InvalidArgument) as info:
        prepare_job(model, req)
    return info.value.message


def base_object(array: np.ndarray) -> object:
    base: object = array
    while isinstance(base, np.ndarray) and base.base is not None:
        base = base.base
    return base


# --------------------------------------------------------------------------- success paths


def test_raw_inputs_become_views_of_the_request_bytes(batched: ModelVersion) -> None:
    inputs = good_inputs(batch=3)
    job = prepare_job(batched, request(inputs, id="r1"))
    assert job.batch_size == 3
    assert job.request_id == "r1"
    assert list(job.inputs) == ["INPUT0", "INPUT1"]
    x0 = job.inputs["INPUT0"]
    assert x0.dtype == np.float32
    assert x0.shape == (3, 4)
    np.testing.assert_array_equal(x0, np.arange(12, dtype=np.float32).reshape(3, 4))
    # no copy: the array is a read-only view whose memory is the protobuf's bytes object
    raw = inputs[0].raw
    assert raw is not None
    assert base_object(x0) is raw
    assert not x0.flags.writeable
    assert np.shares_memory(x0, np.frombuffer(raw, dtype=np.uint8))


def test_reshape_is_applied_to_inputs(batched: ModelVersion) -> None:
    inputs = good_inputs(batch=3)
    job = prepare_job(batched, request(inputs))
    x1 = job.inputs["INPUT1"]
    assert x1.dtype == np.int32
    assert x1.shape == (3, 4)  # config dims [2,2], model sees reshape [4]
    np.testing.assert_array_equal(x1, np.arange(12, dtype=np.int32).reshape(3, 4))
    assert base_object(x1) is inputs[1].raw


def test_typed_contents_are_reshaped(batched: ModelVersion) -> None:
    inputs = [
        InputTensor("INPUT0", "FP32", (1, 4), contents=np.array([1, 2, 3, 4], np.float32)),
        InputTensor("INPUT1", "INT32", (1, 2, 2), contents=np.array([5, 6, 7, 8], np.int32)),
    ]
    job = prepare_job(batched, request(inputs))
    assert job.batch_size == 1
    np.testing.assert_array_equal(job.inputs["INPUT0"], [[1, 2, 3, 4]])
    assert job.inputs["INPUT0"].dtype == np.float32
    np.testing.assert_array_equal(job.inputs["INPUT1"], [[5, 6, 7, 8]])


def test_optional_input_may_be_omitted_or_given(batched: ModelVersion) -> None:
    job = prepare_job(batched, request(good_inputs()))
    assert "OPT" not in job.inputs
    job = prepare_job(batched, request([*good_inputs(), fp32("OPT", [[1.0], [2.0]])]))
    np.testing.assert_array_equal(job.inputs["OPT"], [[1.0], [2.0]])


def test_requested_outputs_default_to_all_in_config_order(batched: ModelVersion) -> None:
    job = prepare_job(batched, request(good_inputs()))
    assert job.outputs == ["OUTPUT0", "OUTPUT1", "LABEL"]


def test_requested_outputs_keep_order_and_drop_duplicates(batched: ModelVersion) -> None:
    job = prepare_job(batched, request(good_inputs(), ["LABEL", "OUTPUT0", "LABEL", "OUTPUT0"]))
    assert job.outputs == ["LABEL", "OUTPUT0"]


def test_unbatched_model_has_batch_size_zero(plain: ModelVersion) -> None:
    raw_text = datatypes.serialize_bytes_tensor([b"a", b"\xff\x00", b""])
    bits = np.array([[0x3F80, 0x4000, 0x4040], [0, 1, 2]], dtype=np.uint16)
    inputs = [
        InputTensor("TEXT", "BYTES", (3,), raw=raw_text),
        InputTensor("X", "BF16", (2, 3), raw=bits.tobytes()),
    ]
    job = prepare_job(plain, request(inputs, model_name="plain"))
    assert job.batch_size == 0
    text = job.inputs["TEXT"]
    assert text.dtype == np.object_
    assert text.shape == (3,)
    assert list(text) == [b"a", b"\xff\x00", b""]
    x = job.inputs["X"]
    assert x.dtype == np.uint16
    np.testing.assert_array_equal(x, bits)


def test_bytes_input_multidimensional_raw(batched: ModelVersion) -> None:
    model = make_version(
        'name: "b" max_batch_size: 4 input [{ name: "T" data_type: TYPE_STRING dims: [2] }] '
        'output [{ name: "U" data_type: TYPE_STRING dims: [2] }]'
    )
    items = [b"one", b"two", b"three", b"four"]
    inputs = [InputTensor("T", "BYTES", (2, 2), raw=datatypes.serialize_bytes_tensor(items))]
    job = prepare_job(model, request(inputs, model_name="b"))
    assert job.batch_size == 2
    assert job.inputs["T"].shape == (2, 2)
    assert job.inputs["T"].tolist() == [[b"one", b"two"], [b"three", b"four"]]


def test_bytes_input_typed_contents(plain: ModelVersion) -> None:
    contents = np.empty(2, dtype=np.object_)
    contents[:] = [b"x", b"yz"]
    inputs = [
        InputTensor("TEXT", "BYTES", (2,), contents=contents),
        InputTensor("X", "BF16", (2, 0), raw=b""),
    ]
    job = prepare_job(plain, request(inputs, model_name="plain"))
    assert list(job.inputs["TEXT"]) == [b"x", b"yz"]
    assert job.inputs["X"].shape == (2, 0)


# --------------------------------------------------------------------------- error messages


def test_unexpected_input(batched: ModelVersion) -> None:
    assert error_of(batched, request([*good_inputs(), fp32("NOPE", [[1.0]])])) == (
        "unexpected inference input 'NOPE' for model 'batched'"
    )


def test_duplicate_input(batched: ModelVersion) -> None:
    inputs = [*good_inputs(), fp32("INPUT0", np.zeros((2, 4)))]
    assert error_of(batched, request(inputs)) == (
        "[request id: <id_unknown>] input 'INPUT0' already exists in request"
    )


def test_missing_required_input(batched: ModelVersion) -> None:
    assert error_of(batched, request([fp32("OPT", [[1.0]]), fp32("INPUT0", np.zeros((1, 4)))])) == (
        "[request id: <id_unknown>] expected number of inputs between 2 and 3 but got 2 "
        "inputs for model 'batched'. Got input(s) ['INPUT0','OPT'], but missing required "
        "input(s) ['INPUT1']. Please provide all required input(s)."
    )


def test_missing_all_inputs(batched: ModelVersion) -> None:
    assert error_of(batched, request([])) == (
        "[request id: <id_unknown>] expected number of inputs between 2 and 3 but got 0 "
        "inputs for model 'batched'. Got input(s) [], but missing required input(s) "
        "['INPUT0','INPUT1']. Please provide all required input(s)."
    )


def test_no_batch_dimension(batched: ModelVersion) -> None:
    inputs = [InputTensor("INPUT0", "FP32", (), raw=b"\x00" * 4), good_inputs()[1]]
    assert error_of(batched, request(inputs)) == (
        "[request id: <id_unknown>] input 'INPUT0' has no shape but model requires batch "
        "dimension for 'batched'"
    )


def test_batch_size_mismatch(batched: ModelVersion) -> None:
    inputs = [good_inputs(batch=2)[0], good_inputs(batch=3)[1]]
    assert error_of(batched, request(inputs)) == (
        "[request id: <id_unknown>] input 'INPUT0' batch size does not match other inputs "
        "for 'batched'"
    )


def test_batch_size_too_large(batched: ModelVersion) -> None:
    assert error_of(batched, request(good_inputs(batch=9))) == (
        "[request id: <id_unknown>] inference request batch-size must be <= 8 for 'batched'"
    )


def test_batch_size_zero(batched: ModelVersion) -> None:
    assert error_of(batched, request(good_inputs(batch=0))) == (
        "[request id: <id_unknown>] inference request batch-size must be >= 1 for 'batched'"
    )


def test_datatype_mismatch(batched: ModelVersion) -> None:
    inputs = [good_inputs()[0], fp32("INPUT1", np.zeros((2, 2, 2)))]
    assert error_of(batched, request(inputs)) == (
        "[request id: <id_unknown>] inference input 'INPUT1' data-type is 'FP32', but model "
        "'batched' expects 'INT32'"
    )


@pytest.mark.parametrize(
    ("shape", "expected"),
    [((2, 5), "[2,5]"), ((2, 4, 1), "[2,4,1]"), ((2,), "[2]")],
)
def test_unexpected_shape(batched: ModelVersion, shape: tuple[int, ...], expected: str) -> None:
    inputs = [InputTensor("INPUT0", "FP32", shape, raw=b""), good_inputs()[1]]
    assert error_of(batched, request(inputs)) == (
        "[request id: <id_unknown>] unexpected shape for input 'INPUT0' for model 'batched'. "
        f"Expected [-1,4], got {expected}. {BATCH_NOTE}"
    )


def test_unexpected_shape_reports_config_dims_not_reshape(batched: ModelVersion) -> None:
    inputs = [good_inputs()[0], int32("INPUT1", np.zeros((2, 4)))]
    assert error_of(batched, request(inputs)) == (
        "[request id: <id_unknown>] unexpected shape for input 'INPUT1' for model 'batched'. "
        f"Expected [-1,2,2], got [2,4]. {BATCH_NOTE}"
    )


def test_negative_dimension(plain: ModelVersion) -> None:
    inputs = [
        InputTensor("TEXT", "BYTES", (-2,), raw=b""),
        InputTensor("X", "BF16", (2, 1), raw=b"\x00" * 4),
    ]
    assert error_of(plain, request(inputs, model_name="plain")) == (
        "[request id: <id_unknown>] All input dimensions should be specified for input 'TEXT' "
        "for model 'plain', got [-2]"
    )


def test_raw_byte_size_mismatch(batched: ModelVersion) -> None:
    inputs = [InputTensor("INPUT0", "FP32", (2, 4), raw=b"\x00" * 30), good_inputs()[1]]
    assert error_of(batched, request(inputs)) == (
        "[request id: <id_unknown>] input byte size mismatch for input 'INPUT0' for model "
        "'batched'. Expected 32, got 30"
    )


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (
            b"\x01\x00",
            "incomplete string length indicator for inference input 'TEXT' for model 'plain', "
            "expecting 4 bytes but only 2 bytes available. Please make sure the string length "
            "indicator is in one buffer.",
        ),
        (
            b"\x09\x00\x00\x00abc",
            "expected 2 string elements for inference input 'TEXT' for model 'plain', got 1",
        ),
        (
            b"\x01\x00\x00\x00a\x09\x00\x00\x00abc",
            "incomplete string element 1 for inference input 'TEXT' for model 'plain': "
            "9 bytes announced, 3 present",
        ),
        (
            b"\x01\x00\x00\x00a",
            "expected 2 string elements for inference input 'TEXT' for model 'plain', got 1",
        ),
        (
            b"\x01\x00\x00\x00a" * 3,
            "unexpected number of string elements 3 for inference input 'TEXT' for model "
            "'plain', expecting 2",
        ),
    ],
)
def test_malformed_bytes_raw(plain: ModelVersion, raw: bytes, reason: str) -> None:
    inputs = [
        InputTensor("TEXT", "BYTES", (2,), raw=raw),
        InputTensor("X", "BF16", (2, 1), raw=b"\x00" * 4),
    ]
    assert error_of(plain, request(inputs, model_name="plain")) == (
        f"[request id: <id_unknown>] {reason}"
    )


def test_bytes_contents_count_mismatch(plain: ModelVersion) -> None:
    contents = np.empty(2, dtype=np.object_)
    contents[:] = [b"a", b"b"]
    inputs = [
        InputTensor("TEXT", "BYTES", (3,), contents=contents),
        InputTensor("X", "BF16", (2, 1), raw=b"\x00" * 4),
    ]
    assert error_of(plain, request(inputs, model_name="plain")) == (
        "[request id: <id_unknown>] expected 3 string elements for inference input 'TEXT' "
        "for model 'plain', got 2"
    )


def test_typed_contents_count_mismatch(batched: ModelVersion) -> None:
    inputs = [
        InputTensor("INPUT0", "FP32", (2, 4), contents=np.zeros(7, np.float32)),
        good_inputs()[1],
    ]
    assert error_of(batched, request(inputs)) == (
        "[request id: <id_unknown>] input byte size mismatch for input 'INPUT0' for model "
        "'batched'. Expected 32, got 28"
    )


def test_input_without_data(batched: ModelVersion) -> None:
    inputs = [InputTensor("INPUT0", "FP32", (2, 4)), good_inputs()[1]]
    assert error_of(batched, request(inputs)) == (
        "unable to find data for input tensor 'INPUT0' for model 'batched' in request."
    )


def test_unexpected_output(batched: ModelVersion) -> None:
    assert error_of(batched, request(good_inputs(), ["OUTPUT0", "NOPE"])) == (
        "unexpected inference output 'NOPE' for model 'batched'"
    )


def test_classification_output(batched: ModelVersion) -> None:
    req = request(good_inputs())
    req.outputs = [RequestedOutput("OUTPUT0", {"classification": 3})]
    assert prepare_job(batched, req).outputs == ["OUTPUT0"]
    for value, text in (
        (0, "invalid value for 'classification' parameter, expected >= 0"),
        ("3", "invalid value type for 'classification' parameter, expected int64_param"),
        (True, "invalid value type for 'classification' parameter, expected int64_param"),
        (UInt64(3), "invalid value type for 'classification' parameter, expected int64_param"),
    ):
        req.outputs = [RequestedOutput("OUTPUT0", {"classification": value})]
        assert error_of(batched, req) == text
    req.outputs = [RequestedOutput("OUTPUT0", {"classification": 1, "shared_memory_region": "r"})]
    assert error_of(batched, req) == (
        "output can't set both 'shared_memory_region' and 'classification'"
    )


def test_priority_and_timeout_parameters(batched: ModelVersion) -> None:
    job = prepare_job(batched, request(good_inputs(), parameters={"priority": 2, "timeout": 500}))
    assert (job.priority, job.timeout_us) == (2, 500)
    job = prepare_job(batched, request(good_inputs()))
    assert (job.priority, job.timeout_us) == (0, 0)


@pytest.mark.parametrize(
    ("key", "value", "shown"),
    [
        ("priority", -1, "-1"),
        ("timeout", "5", "'5'"),
        ("priority", True, "True"),
        ("timeout", 1.5, "1.5"),
    ],
)
def test_bad_priority_or_timeout_parameter(
    batched: ModelVersion, key: str, value: object, shown: str
) -> None:
    assert error_of(batched, request(good_inputs(), parameters={key: value})) == (
        f"parameter '{key}' for model 'batched' must be a non-negative integer, got {shown}"
    )


# --------------------------------------------------------------------------- build_outputs


def test_build_outputs_undoes_reshape_and_follows_job_order(batched: ModelVersion) -> None:
    job = Job(inputs={}, outputs=["OUTPUT1", "LABEL", "OUTPUT0"], batch_size=3)
    results: dict[str, np.ndarray] = {
        "OUTPUT0": np.ones((3, 4), np.float32),
        "OUTPUT1": np.arange(12, dtype=np.int32).reshape(3, 4),
        "LABEL": np.array([2, 0, 1], np.int64),
        "IGNORED": np.zeros(1, np.float32),
    }
    outputs = build_outputs(batched, job, results)
    assert [o.name for o in outputs] == ["OUTPUT1", "LABEL", "OUTPUT0"]
    by_name = {o.name: o for o in outputs}
    assert by_name["OUTPUT1"].datatype == "INT32"
    assert by_name["OUTPUT1"].shape == (3, 2, 2)
    np.testing.assert_array_equal(
        by_name["OUTPUT1"].array, np.arange(12, dtype=np.int32).reshape(3, 2, 2)
    )
    assert by_name["LABEL"].datatype == "INT64"
    assert by_name["LABEL"].shape == (3, 1)
    np.testing.assert_array_equal(by_name["LABEL"].array, [[2], [0], [1]])
    assert by_name["OUTPUT0"].shape == (3, 4)
    assert by_name["OUTPUT0"].array is results["OUTPUT0"]  # no reshape, no copy


def test_build_outputs_unbatched_bytes_bf16_and_scalar(plain: ModelVersion) -> None:
    job = Job(inputs={}, outputs=["UPPER", "Y", "S"], batch_size=0)
    results = {
        "UPPER": np.array(["A", "BC"]),  # onnxruntime hands strings back as str
        "Y": np.array([[0x3F80], [0x4000]], np.uint16),
        "S": np.array(1.5, np.float32),
    }
    outputs = {o.name: o for o in build_outputs(plain, job, results)}
    assert outputs["UPPER"].datatype == "BYTES"
    assert outputs["UPPER"].shape == (2,)
    assert outputs["Y"].datatype == "BF16"
    assert outputs["Y"].array.dtype == np.uint16
    assert outputs["S"].shape == (1,)  # reshape [] undone to config dims [1]
    assert outputs["S"].array.tolist() == [1.5]


def test_build_outputs_object_bytes_accepted(plain: ModelVersion) -> None:
    array = np.empty(2, dtype=np.object_)
    array[:] = [b"a", b"b"]
    job = Job(inputs={}, outputs=["UPPER"], batch_size=0)
    (out,) = build_outputs(plain, job, {"UPPER": array})
    assert out.array is array


def test_build_outputs_empty_array_takes_the_declared_dtype(plain: ModelVersion) -> None:
    job = Job(inputs={}, outputs=["UPPER"], batch_size=0)
    (out,) = build_outputs(plain, job, {"UPPER": np.array([])})  # float64, no elements
    assert out.datatype == "BYTES" and out.shape == (0,) and out.array.dtype == np.object_


def test_build_outputs_sends_another_dtype_as_produced(batched: ModelVersion) -> None:
    """As Triton 2.51: a Python model's FP64 array for an FP32 output goes out as FP64."""
    job = Job(inputs={}, outputs=["OUTPUT0"], batch_size=1)
    (out,) = build_outputs(batched, job, {"OUTPUT0": np.zeros((1, 4), np.float64)})
    assert out.datatype == "FP64" and out.array.dtype == np.float64


def test_build_outputs_dtype_without_a_datatype_is_internal(batched: ModelVersion) -> None:
    job = Job(inputs={}, outputs=["OUTPUT0"], batch_size=1)
    with pytest.raises(Internal) as info:
        build_outputs(batched, job, {"OUTPUT0": np.zeros((1, 4), np.complex64)})
    assert info.value.message == (
        "model 'batched' produced output 'OUTPUT0' as complex64, which has no datatype in "
        "the inference protocol"
    )


# --------------------------------------------------------------------------- InferenceServer.infer


class FakeScheduler:
    """Echoes inputs to outputs (OUTPUT0 = INPUT0 ...), or raises what it is told to."""

    def __init__(self, error: ServerError | None = None) -> None:
        self.error = error
        self.jobs: list[Job] = []
        self.stopped = False

    async def submit(self, job: Job) -> ExecutionResult:
        self.jobs.append(job)
        if self.error is not None:
            raise self.error
        b = job.batch_size
        outputs = {
            "OUTPUT0": np.asarray(job.inputs["INPUT0"]) * 2,
            "OUTPUT1": np.asarray(job.inputs["INPUT1"]),
            "LABEL": np.arange(b, dtype=np.int64),
        }
        return ExecutionResult(
            {n: outputs[n] for n in job.outputs}, 1_000, BatchTimings(10, 20, 50, 60)
        )

    @property
    def inflight(self) -> int:
        return 0

    async def stop(self) -> None:
        self.stopped = True


class FakeModels:
    def __init__(self, model: ModelVersion) -> None:
        self.model = model

    def get(self, name: str, version: str = "") -> ModelVersion:
        if name != self.model.name:
            raise NotFound(f"Request for unknown model: '{name}' is not found")
        return self.model

    def find(self, name: str, version: str = "") -> ModelVersion | None:
        return self.model if name == self.model.name else None

    def all_ready(self) -> bool:
        return True


def make_server(scheduler: FakeScheduler) -> tuple[InferenceServer, ModelVersion]:
    model = make_version(BATCHED, scheduler)
    return InferenceServer(FakeModels(model)), model  # type: ignore[arg-type]


async def test_infer_success() -> None:
    scheduler = FakeScheduler()
    server, model = make_server(scheduler)
    response = await server.infer(request(good_inputs(batch=2), ["OUTPUT1", "OUTPUT0"], id="42"))
    assert (response.model_name, response.model_version, response.id) == ("batched", "1", "42")
    assert [o.name for o in response.outputs] == ["OUTPUT1", "OUTPUT0"]
    assert response.outputs[0].shape == (2, 2, 2)
    np.testing.assert_array_equal(
        response.outputs[1].array, np.arange(8, dtype=np.float32).reshape(2, 4) * 2
    )
    assert len(scheduler.jobs) == 1
    assert scheduler.jobs[0].request_id == "42"
    stats = model.stats
    assert (stats.success.count, stats.fail.count) == (1, 0)
    assert stats.queue.ns == 1_000
    assert stats.compute_infer.ns == 30


async def test_infer_validation_error_gets_request_id_prefix() -> None:
    """Triton's request checks carry LogRequest(); refused requests are no failures."""
    server, model = make_server(FakeScheduler())
    with pytest.raises(InvalidArgument) as info:
        await server.infer(request(good_inputs(batch=9), id="my-req"))
    assert info.value.message == (
        "[request id: my-req] inference request batch-size must be <= 8 for 'batched'"
    )
    stats = model.stats
    assert (stats.success.count, stats.fail.count) == (0, 0)


async def test_infer_without_id_says_id_unknown() -> None:
    server, _ = make_server(FakeScheduler())
    with pytest.raises(InvalidArgument) as info:
        await server.infer(request(good_inputs(batch=9)))
    assert info.value.message == (
        "[request id: <id_unknown>] inference request batch-size must be <= 8 for 'batched'"
    )


async def test_infer_unknown_model_has_no_prefix() -> None:
    server, _ = make_server(FakeScheduler())
    with pytest.raises(NotFound) as info:
        await server.infer(request(good_inputs(), model_name="ghost", id="7"))
    # As in Triton: the lookup fails before the request exists, so no id prefix.
    assert info.value.message == "Request for unknown model: 'ghost' is not found"


async def test_infer_backend_error_keeps_its_text_and_class_and_counts_as_backend() -> None:
    server, model = make_server(FakeScheduler(Internal("onnx runtime error: boom")))
    with pytest.raises(Internal) as info:
        await server.infer(request(good_inputs(), id="x"))
    assert info.value.message == "onnx runtime error: boom"  # Triton adds no prefix here
    assert model.stats.fail.count == 1
    assert model.stats.failures == {"REJECTED": 0, "CANCELED": 0, "BACKEND": 1, "OTHER": 0}


async def test_infer_timeout_counts_as_rejected() -> None:
    error = Unavailable("Request timeout expired", failure="REJECTED")
    server, model = make_server(FakeScheduler(error))
    with pytest.raises(Unavailable):
        await server.infer(request(good_inputs()))
    assert model.stats.failures["REJECTED"] == 1 and model.stats.fail.count == 1


async def test_infer_refused_by_scheduler_is_not_a_failure() -> None:
    """A full queue (or an unloading model) refuses the request before accepting it."""
    server, model = make_server(FakeScheduler(Unavailable("model is unloading")))
    with pytest.raises(Unavailable):
        await server.infer(request(good_inputs()))
    assert model.stats.fail.count == 0


async def test_after_stop_accepting_streams_are_refused_and_unary_requests_served() -> None:
    """Shutdown: not ready; a request on an open stream is refused; during the lame duck
    a unary request that still reaches the core (a balancer's kept connection) is served;
    after it (``refuse_new``) it is refused too, while an ensemble step of a request in
    flight is still served."""
    scheduler = FakeScheduler()
    server, _ = make_server(scheduler)
    assert server.is_ready()
    server.stop_accepting()
    assert not server.is_ready()
    with pytest.raises(Unavailable) as info:
        server.stream_infer(request(good_inputs(), id="late"))
    assert info.value.message == f"[request id: late] {STOPPING}"
    assert scheduler.jobs == []
    response = await server.infer(request(good_inputs(), id="straggler"))
    assert response.id == "straggler"
    # The steps of an ensemble already in flight go through the step runner.
    steps = [r async for r in server.step_runner.stream_infer(request(good_inputs(), id="s"))]
    assert [r.id for r in steps] == ["s"]
    assert len(scheduler.jobs) == 2
    server.refuse_new()
    with pytest.raises(Unavailable) as refused:
        await server.infer(request(good_inputs(), id="later"))
    assert refused.value.message == f"[request id: later] {STOPPING}"
    steps = [r async for r in server.step_runner.stream_infer(request(good_inputs(), id="t"))]
    assert [r.id for r in steps] == ["t"]
    assert len(scheduler.jobs) == 3
