"""Requests with tensors in shared memory, through InferenceServer: inputs as views of the
region (no copy), outputs written into it, regions held while in use, Triton's texts for
every parameter fault; and the gRPC codec pairing raw contents with the other inputs."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from google.protobuf import text_format
from test_shm_registry import Segment

from inference import grpc_service_pb2 as pb
from inference import model_config_pb2 as mc
from service.core.inference_server import EXTENSIONS, InferenceServer
from service.core.model import ModelState, ModelVersion, io_specs
from service.errors import Internal, InvalidArgument, NotFound, ServerError
from service.grpc_frontend.codec import decode_infer_request, encode_infer_response
from service.scheduling.base import ExecutionResult, Job
from service.shm import SharedMemoryRegistry
from service.shm.binding import parse_parameters, uses_shared_memory
from service.statistics import BatchTimings
from service.types import InferRequest, InputTensor, RequestedOutput
from wire import datatypes

CONFIG = """
name: "echo"
max_batch_size: 8
input [
  { name: "IN" data_type: TYPE_FP32 dims: [4] },
  { name: "TEXT" data_type: TYPE_STRING dims: [1] optional: true }
]
output [
  { name: "OUT" data_type: TYPE_FP32 dims: [4] },
  { name: "TEXT_OUT" data_type: TYPE_STRING dims: [1] }
]
"""


class EchoScheduler:
    """OUT = IN * 2, TEXT_OUT = TEXT; keeps every job (and can fail on demand)."""

    def __init__(self) -> None:
        self.jobs: list[Job] = []
        self.error: ServerError | None = None

    async def submit(self, job: Job) -> ExecutionResult:
        self.jobs.append(job)
        if self.error is not None:
            raise self.error
        batch = job.batch_size
        text = job.inputs.get("TEXT", np.array([[b"-"]] * batch, dtype=object))
        outputs = {"OUT": job.inputs["IN"] * 2, "TEXT_OUT": text}
        return ExecutionResult({n: outputs[n] for n in job.outputs}, 10, BatchTimings(1, 2, 3, 4))

    @property
    def inflight(self) -> int:
        return 0

    async def stop(self) -> None:
        pass


class OneModel:
    def __init__(self, model: ModelVersion) -> None:
        self.model = model

    def get(self, name: str, version: str = "") -> ModelVersion:
        if name != self.model.name:
            raise NotFound(f"Request for unknown model: '{name}' is not found")
        return self.model

    def all_ready(self) -> bool:
        return True

    def loaded(self, name: str = "", version: str = "") -> list[ModelVersion]:
        return [self.model]


@pytest.fixture
def scheduler() -> EchoScheduler:
    return EchoScheduler()


@pytest.fixture
def registry() -> Iterator[SharedMemoryRegistry]:
    reg = SharedMemoryRegistry(load_cuda=False)
    yield reg
    reg.close()


@pytest.fixture
def server(scheduler: EchoScheduler, registry: SharedMemoryRegistry) -> InferenceServer:
    config = text_format.Parse(CONFIG, mc.ModelConfig())
    model = ModelVersion(
        name="echo",
        version=1,
        config=config,
        state=ModelState.READY,
        scheduler=scheduler,  # type: ignore[arg-type]
        inputs=io_specs(list(config.input)),
        outputs=io_specs(list(config.output)),
    )
    return InferenceServer(OneModel(model), shared_memory=registry)  # type: ignore[arg-type]


@pytest.fixture
def segment() -> Iterator[Segment]:
    seg = Segment(4096)
    yield seg
    seg.close()


def shm(region: str, size: int, offset: int = 0) -> dict[str, Any]:
    params: dict[str, Any] = {"shared_memory_region": region, "shared_memory_byte_size": size}
    if offset:
        params["shared_memory_offset"] = offset
    return params


def request(
    inputs: list[InputTensor], outputs: list[RequestedOutput] | None = None
) -> InferRequest:
    return InferRequest("echo", id="r1", inputs=inputs, outputs=outputs or [])


def test_extensions_are_advertised_in_tritons_order() -> None:
    at = EXTENSIONS.index
    assert at("model_configuration") < at("system_shared_memory") < at("cuda_shared_memory")
    assert at("cuda_shared_memory") < at("binary_tensor_data")


async def test_input_is_a_view_and_output_lands_in_the_region(
    server: InferenceServer,
    scheduler: EchoScheduler,
    registry: SharedMemoryRegistry,
    segment: Segment,
) -> None:
    segment.array(np.float32, 4, 64)[:] = [1, 2, 3, 4]
    server.register_system_shared_memory("in", segment.key, 0, 1024)
    server.register_system_shared_memory("out", segment.key, 2048, 1024)
    response = await server.infer(
        request(
            [InputTensor("IN", "FP32", (1, 4), parameters=shm("in", 16, 64))],
            [RequestedOutput("OUT", shm("out", 16, 32))],
        )
    )
    assert segment.array(np.float32, 4, 2048 + 32).tolist() == [2, 4, 6, 8]
    (out,) = response.outputs
    assert (out.name, out.datatype, out.shape, out.wire) == ("OUT", "FP32", (1, 4), b"")
    # The model saw the region itself: a later change by the client shows through.
    seen = scheduler.jobs[0].inputs["IN"]
    segment.array(np.float32, 1, 64)[0] = 42
    assert seen[0, 0] == 42
    del seen, scheduler.jobs[:]
    assert all(s.byte_size == 1024 for s in server.system_shared_memory_status())
    server.unregister_system_shared_memory()  # nothing held once the request is answered
    # gRPC: the output keeps name, datatype and shape; its raw contents are empty.
    message = encode_infer_response(response, 1 << 20)
    assert list(message.raw_output_contents) == [b""]
    assert list(message.outputs[0].shape) == [1, 4]
    assert server.model_statistics()[0].stats.success.count == 1


async def test_one_region_serves_two_requests(server: InferenceServer, segment: Segment) -> None:
    segment.array(np.float32, 8)[:] = np.arange(8)
    server.register_system_shared_memory("io", segment.key, 0, 4096)
    for index in range(2):
        await server.infer(
            request(
                [InputTensor("IN", "FP32", (1, 4), parameters=shm("io", 16, 16 * index))],
                [RequestedOutput("OUT", shm("io", 16, 1024 + 16 * index))],
            )
        )
    assert segment.array(np.float32, 8, 1024).tolist() == [0, 2, 4, 6, 8, 10, 12, 14]


async def test_bytes_in_and_out(server: InferenceServer, segment: Segment) -> None:
    wire = datatypes.serialize_bytes_tensor(np.array([b"hello"], dtype=object))
    segment.shm.buf[: len(wire)] = wire
    segment.array(np.float32, 4, 512)[:] = 1
    server.register_system_shared_memory("r", segment.key, 0, 4096)
    response = await server.infer(
        request(
            [
                InputTensor("IN", "FP32", (1, 4), parameters=shm("r", 16, 512)),
                InputTensor("TEXT", "BYTES", (1, 1), parameters=shm("r", len(wire))),
            ],
            [RequestedOutput("TEXT_OUT", shm("r", 64, 1024))],
        )
    )
    assert response.outputs[0].shape == (1, 1)
    assert bytes(segment.shm.buf[1024 : 1024 + len(wire)]) == wire


async def test_output_region_too_small(server: InferenceServer, segment: Segment) -> None:
    segment.array(np.float32, 4)[:] = 1
    server.register_system_shared_memory("r", segment.key, 0, 64)
    with pytest.raises(Internal) as info:
        await server.infer(
            request(
                [InputTensor("IN", "FP32", (1, 4), parameters=shm("r", 16))],
                [RequestedOutput("OUT", shm("r", 8, 16))],
            )
        )
    assert info.value.message == (
        "shared memory size specified with the request for output 'OUT' (8 bytes) should be "
        "at least 16 bytes to hold the results"
    )
    server.unregister_system_shared_memory("r")  # released despite the failure


async def test_input_byte_size_must_match_the_shape(
    server: InferenceServer, segment: Segment
) -> None:
    server.register_system_shared_memory("r", segment.key, 0, 64)
    with pytest.raises(InvalidArgument) as info:
        await server.infer(request([InputTensor("IN", "FP32", (1, 4), parameters=shm("r", 12))]))
    assert info.value.message == (
        "[request id: r1] input byte size mismatch for input 'IN' for model 'echo'. "
        "Expected 16, got 12"
    )
    server.unregister_system_shared_memory("r")


async def test_region_faults(server: InferenceServer, segment: Segment) -> None:
    server.register_system_shared_memory("r", segment.key, 0, 64)
    cases: list[tuple[list[InputTensor], list[RequestedOutput], type[ServerError], str]] = [
        (
            [InputTensor("IN", "FP32", (1, 4), parameters=shm("ghost", 16))],
            [],
            NotFound,
            "Unable to find shared memory region: 'ghost'",
        ),
        (
            [InputTensor("IN", "FP32", (1, 4))],
            [RequestedOutput("OUT", shm("ghost", 16))],
            NotFound,
            "Unable to find shared memory region: 'ghost'",
        ),
        (
            [InputTensor("IN", "FP32", (1, 4), parameters=shm("r", 16, 64))],
            [],
            InvalidArgument,
            "Invalid offset for shared memory region: 'r'",
        ),
        (
            [InputTensor("IN", "FP32", (1, 4), parameters=shm("r", 16, 56))],
            [],
            InvalidArgument,
            "Invalid offset + byte size for shared memory region: 'r'",
        ),
        (
            [
                InputTensor(
                    "IN", "FP32", (1, 4), contents=np.zeros(4, np.float32), parameters=shm("r", 16)
                )
            ],
            [],
            InvalidArgument,
            "unexpected 'content' provided when using shared memory for input tensor 'IN' for "
            "model 'echo'",
        ),
        (
            [InputTensor("IN", "FP32", (1, 4), parameters=shm("r", 16))],
            [RequestedOutput("OUT", {**shm("r", 16), "classification": 2})],
            InvalidArgument,
            "output can't set both 'shared_memory_region' and 'classification'",
        ),
    ]
    for inputs, outputs, kind, text in cases:
        with pytest.raises(kind) as info:
            inputs[0].raw = None if inputs[0].parameters else np.zeros(4, np.float32).tobytes()
            await server.infer(request(inputs, outputs))
        assert info.value.message == text
    server.unregister_system_shared_memory("r")  # no request kept it
    stats = server.model_statistics()[0].stats
    assert (stats.success.count, stats.fail.count) == (0, 0)  # refused, not failed


@pytest.mark.parametrize(
    ("parameters", "text"),
    [
        (
            {"shared_memory_region": 3},
            "invalid value type for 'shared_memory_region' parameter for tensor 'T', "
            "expected string_param.",
        ),
        (
            {"shared_memory_offset": 0},
            "'shared_memory_offset' can not be specified without 'shared_memory_region' "
            "parameter for tensor 'T'",
        ),
        (
            {"shared_memory_byte_size": 4},
            "'shared_memory_byte_size' can not be specified without 'shared_memory_region' "
            "parameter for tensor 'T'",
        ),
        (
            {"shared_memory_region": "r", "shared_memory_offset": "0"},
            "invalid value type for 'shared_memory_offset' parameter for tensor 'T', "
            "expected int64_param.",
        ),
        (
            {"shared_memory_region": "r", "shared_memory_byte_size": True},
            "invalid value type for 'shared_memory_byte_size' parameter for tensor 'T', "
            "expected int64_param.",
        ),
        (
            {"shared_memory_region": "r"},
            "'shared_memory_byte_size' must be specified along with 'shared_memory_region' "
            "parameter for tensor 'T'",
        ),
    ],
)
def test_parameter_faults(parameters: dict[str, Any], text: str) -> None:
    with pytest.raises(InvalidArgument) as info:
        parse_parameters("T", parameters)
    assert info.value.message == text


def test_parameters() -> None:
    assert parse_parameters("T", {"other": 1}) is None
    assert parse_parameters("T", shm("r", 8, 4)) == ("r", 4, 8)
    plain = request([InputTensor("IN", "FP32", (1, 4), parameters={"x": 1})])
    assert not uses_shared_memory(plain)
    plain.outputs = [RequestedOutput("OUT", shm("r", 8))]
    assert uses_shared_memory(plain)


async def test_region_held_while_the_model_runs(
    server: InferenceServer, scheduler: EchoScheduler, segment: Segment
) -> None:
    """Unregistering a region a request is using fails with Triton's text; afterwards it
    succeeds. A failing execution releases it too."""
    server.register_system_shared_memory("r", segment.key, 0, 64)

    class Probe(EchoScheduler):
        async def submit(self, job: Job) -> ExecutionResult:
            with pytest.raises(Internal) as info:
                server.unregister_system_shared_memory("r")
            assert info.value.message == (
                "Cannot unregister shared memory region 'r', it is currently in use."
            )
            return await super().submit(job)

    model = server._models.get("echo")  # type: ignore[attr-defined]
    model.scheduler = Probe()
    await server.infer(request([InputTensor("IN", "FP32", (1, 4), parameters=shm("r", 16))]))
    model.scheduler = scheduler
    scheduler.error = Internal("boom")
    with pytest.raises(Internal):
        await server.infer(request([InputTensor("IN", "FP32", (1, 4), parameters=shm("r", 16))]))
    server.unregister_system_shared_memory("r")
    assert server.system_shared_memory_status() == []


def test_registry_rpcs_through_the_core(server: InferenceServer) -> None:
    server.unregister_cuda_shared_memory()  # nothing registered: fine
    assert server.cuda_shared_memory_status() == []
    with pytest.raises(InvalidArgument, match="failed to register shared memory region"):
        server.register_cuda_shared_memory("g", bytes(64), 0, 8)
    server.unregister_system_shared_memory()
    server.close_shared_memory()


def test_codec_pairs_raw_contents_with_non_shm_inputs() -> None:
    """Triton's gRPC frontend: a shared-memory input takes no raw_input_contents entry."""
    message = pb.ModelInferRequest(model_name="m")
    first = message.inputs.add(name="A", datatype="FP32", shape=[1])
    first.parameters["shared_memory_region"].string_param = "r"
    first.parameters["shared_memory_byte_size"].int64_param = 4
    message.inputs.add(name="B", datatype="FP32", shape=[1])
    message.raw_input_contents.append(b"\x00\x00\x80\x3f")
    decoded = decode_infer_request(message)
    assert decoded.inputs[0].raw is None
    assert decoded.inputs[0].parameters["shared_memory_region"] == "r"
    assert decoded.inputs[1].raw == b"\x00\x00\x80\x3f"
