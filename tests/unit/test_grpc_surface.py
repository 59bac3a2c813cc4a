"""The real server's gRPC surface: reflection (grpcurl list/describe), health, every RPC."""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import pytest
from google.protobuf import descriptor, descriptor_pb2
from google.protobuf.descriptor_pool import DescriptorPool
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
    ProtoReflectionDescriptorDatabase,
)
from server_process import ServerProcess

from inference import grpc_service_pb2 as pb
from inference import grpc_service_pb2_grpc as pb_grpc
from inference import model_config_pb2 as mc

SERVICE = "inference.GRPCInferenceService"

RPCS = [
    "ServerLive",
    "ServerReady",
    "ModelReady",
    "ServerMetadata",
    "ModelMetadata",
    "ModelInfer",
    "ModelStreamInfer",
    "ModelConfig",
    "ModelStatistics",
    "RepositoryIndex",
    "RepositoryModelLoad",
    "RepositoryModelUnload",
    "SystemSharedMemoryStatus",
    "SystemSharedMemoryRegister",
    "SystemSharedMemoryUnregister",
    "CudaSharedMemoryStatus",
    "CudaSharedMemoryRegister",
    "CudaSharedMemoryUnregister",
    "TraceSetting",
    "LogSettings",
]

# With an empty request: the code each shared-memory RPC answers (Triton's: none of them is
# UNIMPLEMENTED; registering needs a key, and a CUDA handle on a machine with a GPU).
SHARED_MEMORY_ANSWERS = {
    "SystemSharedMemoryStatus": grpc.StatusCode.OK,
    "SystemSharedMemoryRegister": grpc.StatusCode.INTERNAL,
    "SystemSharedMemoryUnregister": grpc.StatusCode.OK,
    "CudaSharedMemoryStatus": grpc.StatusCode.OK,
    "CudaSharedMemoryRegister": grpc.StatusCode.INVALID_ARGUMENT,
    "CudaSharedMemoryUnregister": grpc.StatusCode.OK,
}


# Stopped servers stay referenced until exit: older ServerProcess versions left the stderr pipe
# open, and collecting it mid-session is a ResourceWarning, an error under filterwarnings.
_STOPPED: list[ServerProcess] = []


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    proc = ServerProcess().start()
    try:
        yield proc
    finally:
        proc.stop()
        _STOPPED.append(proc)


@pytest.fixture(scope="module")
def channel(server: ServerProcess) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(server.url) as chan:
        grpc.channel_ready_future(chan).result(timeout=10)
        yield chan


@pytest.fixture(scope="module")
def reflected(channel: grpc.Channel) -> tuple[ProtoReflectionDescriptorDatabase, DescriptorPool]:
    db = ProtoReflectionDescriptorDatabase(channel)
    # A fresh pool: the generated `inference` modules already own these names in the default one.
    return db, DescriptorPool(db)


# --------------------------------------------------------------------------- reflection


def test_list_services(reflected: tuple[ProtoReflectionDescriptorDatabase, DescriptorPool]) -> None:
    db, _ = reflected
    services = set(db.get_services())
    assert {
        SERVICE,
        "grpc.health.v1.Health",
        "grpc.reflection.v1alpha.ServerReflection",
        "grpc.reflection.v1.ServerReflection",
    } <= services


def test_reflection_v1_serves_the_same_answers(channel: grpc.Channel) -> None:
    """grpc.reflection.v1 (what newer clients ask first) lists services and describes
    symbols, itself included; its messages are v1alpha's under another package."""
    call = channel.stream_stream(
        "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
        request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
        response_deserializer=reflection_pb2.ServerReflectionResponse.FromString,
    )
    requests = [
        reflection_pb2.ServerReflectionRequest(list_services=""),
        reflection_pb2.ServerReflectionRequest(file_containing_symbol=SERVICE),
        reflection_pb2.ServerReflectionRequest(
            file_containing_symbol="grpc.reflection.v1.ServerReflection"
        ),
    ]
    listed, inference_file, v1_file = list(call(iter(requests), timeout=10))
    names = {s.name for s in listed.list_services_response.service}
    assert {SERVICE, "grpc.reflection.v1.ServerReflection"} <= names
    files = [
        descriptor_pb2.FileDescriptorProto.FromString(raw)
        for raw in inference_file.file_descriptor_response.file_descriptor_proto
    ]
    assert files[0].package == "inference"
    v1 = descriptor_pb2.FileDescriptorProto.FromString(
        v1_file.file_descriptor_response.file_descriptor_proto[0]
    )
    assert (v1.name, v1.package) == ("grpc/reflection/v1/reflection.proto", "grpc.reflection.v1")
    method = v1.service[0].method[0]
    assert method.input_type == ".grpc.reflection.v1.ServerReflectionRequest"


def test_describe_inference_service(
    reflected: tuple[ProtoReflectionDescriptorDatabase, DescriptorPool],
) -> None:
    _, pool = reflected
    service = pool.FindServiceByName(SERVICE)
    assert service.full_name == SERVICE
    assert [m.name for m in service.methods] == RPCS
    assert len(service.methods) == 20
    ours = pb.DESCRIPTOR.services_by_name["GRPCInferenceService"]
    for method in service.methods:
        expected = ours.methods_by_name[method.name]
        assert method.input_type.full_name == expected.input_type.full_name
        assert method.output_type.full_name == expected.output_type.full_name
        assert method.client_streaming == expected.client_streaming
        assert method.server_streaming == expected.server_streaming
    stream = service.methods_by_name["ModelStreamInfer"]
    assert stream.client_streaming and stream.server_streaming
    assert stream.input_type.full_name == "inference.ModelInferRequest"
    assert stream.output_type.full_name == "inference.ModelStreamInferResponse"
    infer = service.methods_by_name["ModelInfer"]
    assert not infer.client_streaming and not infer.server_streaming
    assert infer.output_type.full_name == "inference.ModelInferResponse"


def test_describe_model_infer_request(
    reflected: tuple[ProtoReflectionDescriptorDatabase, DescriptorPool],
) -> None:
    _, pool = reflected
    message = pool.FindMessageTypeByName("inference.ModelInferRequest")
    fields = {f.name: f for f in message.fields}
    assert [(f.name, f.number) for f in message.fields] == [
        ("model_name", 1),
        ("model_version", 2),
        ("id", 3),
        ("parameters", 4),
        ("inputs", 5),
        ("outputs", 6),
        ("raw_input_contents", 7),
    ]
    assert fields["model_name"].type == descriptor.FieldDescriptor.TYPE_STRING
    assert fields["raw_input_contents"].type == descriptor.FieldDescriptor.TYPE_BYTES
    assert fields["raw_input_contents"].is_repeated
    assert fields["inputs"].message_type is not None
    assert fields["parameters"].message_type is not None
    assert fields["inputs"].message_type.full_name == (
        "inference.ModelInferRequest.InferInputTensor"
    )
    assert fields["parameters"].message_type.GetOptions().map_entry
    tensor = fields["inputs"].message_type
    assert [f.name for f in tensor.fields] == [
        "name",
        "datatype",
        "shape",
        "parameters",
        "contents",
    ]
    contents = tensor.fields_by_name["contents"].message_type
    assert contents is not None
    assert contents.full_name == ("inference.InferTensorContents")


def test_reflection_file_matches_generated_descriptor(
    reflected: tuple[ProtoReflectionDescriptorDatabase, DescriptorPool],
) -> None:
    _, pool = reflected
    served = pool.FindFileContainingSymbol(SERVICE)
    assert served.name == pb.DESCRIPTOR.name
    assert served.package == "inference"
    assert sorted(served.message_types_by_name) == sorted(pb.DESCRIPTOR.message_types_by_name)


REFLECTION_SERVICES = ["grpc.reflection.v1alpha", "grpc.reflection.v1"]


def with_dependencies(file: descriptor.FileDescriptor) -> list[str]:
    """The files an answer about ``file`` carries: itself, then its dependencies, depth
    first, each once (grpc's FillFileDescriptorResponse)."""
    names = [file.name]
    for dependency in file.dependencies:
        names += [n for n in with_dependencies(dependency) if n not in names]
    return names


def reflect(channel: grpc.Channel, service: str, symbols: list[str]) -> list[list[str] | int]:
    """file_containing_symbol for each symbol, on one stream: the names of the files the
    answer carries, in order, or the error code of an error response."""
    call = channel.stream_stream(
        f"/{service}.ServerReflection/ServerReflectionInfo",
        request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
        response_deserializer=reflection_pb2.ServerReflectionResponse.FromString,
    )
    requests = [reflection_pb2.ServerReflectionRequest(file_containing_symbol=s) for s in symbols]
    answers: list[list[str] | int] = []
    for request, response in zip(requests, call(iter(requests), timeout=10), strict=True):
        assert response.original_request == request
        if response.HasField("error_response"):
            answers.append(response.error_response.error_code)
            continue
        answers.append(
            [
                descriptor_pb2.FileDescriptorProto.FromString(raw).name
                for raw in response.file_descriptor_response.file_descriptor_proto
            ]
        )
    return answers


@pytest.mark.parametrize("service", REFLECTION_SERVICES)
def test_symbols_resolve_to_their_files(channel: grpc.Channel, service: str) -> None:
    """Services, methods (grpcurl's `describe Service.Method`: was "Symbol not found"),
    messages, nested messages, fields, enums and enum values each give the file that
    defines them, then its dependencies, as grpc's C++ reflection does."""
    inference_file = with_dependencies(pb.DESCRIPTOR)
    config_file = with_dependencies(mc.DESCRIPTOR)
    health_file = with_dependencies(health_pb2.DESCRIPTOR)
    reflection_file = (
        reflection_pb2.DESCRIPTOR.name
        if service.endswith("v1alpha")
        else "grpc/reflection/v1/reflection.proto"
    )
    expected: dict[str, list[str]] = {
        SERVICE: inference_file,
        f"{SERVICE}.ModelInfer": inference_file,
        f"{SERVICE}.ModelStreamInfer": inference_file,
        f"{SERVICE}.RepositoryModelLoad": inference_file,
        "inference.ModelInferRequest": inference_file,
        "inference.ModelInferRequest.InferInputTensor": inference_file,
        "inference.ModelInferRequest.model_name": inference_file,
        "inference.ModelInferRequest.InferInputTensor.datatype": inference_file,
        "inference.InferParameter.parameter_choice": inference_file,
        "inference.ModelConfig": config_file,
        "inference.ModelConfig.max_batch_size": config_file,
        "inference.DataType": config_file,
        "inference.TYPE_FP32": config_file,
        "grpc.health.v1.Health.Check": health_file,
        "grpc.health.v1.HealthCheckRequest.service": health_file,
        f"{service}.ServerReflection.ServerReflectionInfo": [reflection_file],
    }
    assert reflect(channel, service, list(expected)) == list(expected.values())


@pytest.mark.parametrize("service", REFLECTION_SERVICES)
def test_unknown_symbols_are_not_found(channel: grpc.Channel, service: str) -> None:
    """An unknown name is an error response with NOT_FOUND, and the stream goes on."""
    unknown = [
        f"{SERVICE}.NoSuchMethod",
        f"{SERVICE}.ModelInfer.model_name",  # a method has no members
        "inference.ModelInferRequest.no_such_field",
        "inference.NoSuchMessage",
        "no.such.Service.ModelInfer",
        "ModelInfer",
        f".{SERVICE}",  # fully qualified names have no leading dot here
        "",
    ]
    not_found = grpc.StatusCode.NOT_FOUND.value[0]
    answers = reflect(channel, service, [*unknown, f"{SERVICE}.ModelInfer"])
    assert answers == [*[not_found] * len(unknown), with_dependencies(pb.DESCRIPTOR)]


def test_method_descriptor_through_reflection(channel: grpc.Channel) -> None:
    """What a reflection client does for `describe inference.GRPCInferenceService.ModelInfer`:
    a pool that knows nothing asks for the method's file and describes the method from it."""
    pool = DescriptorPool(ProtoReflectionDescriptorDatabase(channel))
    method = pool.FindMethodByName(f"{SERVICE}.ModelInfer")
    assert method.containing_service.full_name == SERVICE
    assert method.input_type.full_name == "inference.ModelInferRequest"
    assert method.output_type.full_name == "inference.ModelInferResponse"
    with pytest.raises(KeyError):
        DescriptorPool(ProtoReflectionDescriptorDatabase(channel)).FindMethodByName(
            f"{SERVICE}.NoSuchMethod"
        )


# --------------------------------------------------------------------------- health


@pytest.mark.parametrize("service", ["", SERVICE])
def test_health_check_serving(channel: grpc.Channel, service: str) -> None:
    stub = health_pb2_grpc.HealthStub(channel)
    response = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
    assert response.status == health_pb2.HealthCheckResponse.SERVING


def test_health_check_any_service_name_answers_readiness(channel: grpc.Channel) -> None:
    """Triton's Check never looks at the service name: it answers ServerIsReady."""
    stub = health_pb2_grpc.HealthStub(channel)
    response = stub.Check(health_pb2.HealthCheckRequest(service="no.such.Service"), timeout=5)
    assert response.status == health_pb2.HealthCheckResponse.SERVING


# --------------------------------------------------------------------------- shared memory


@pytest.mark.parametrize(("rpc", "code"), sorted(SHARED_MEMORY_ANSWERS.items()))
def test_shared_memory_rpc(channel: grpc.Channel, rpc: str, code: grpc.StatusCode) -> None:
    stub = pb_grpc.GRPCInferenceServiceStub(channel)
    request = getattr(pb, f"{rpc}Request")()
    try:
        getattr(stub, rpc)(request, timeout=5)
        answered = grpc.StatusCode.OK
    except grpc.RpcError as exc:
        answered = exc.code()
    assert answered == code


def test_model_statistics_lists_every_loaded_model(channel: grpc.Channel) -> None:
    stub = pb_grpc.GRPCInferenceServiceStub(channel)
    response = stub.ModelStatistics(pb.ModelStatisticsRequest(), timeout=5)
    assert sorted((s.name, s.version) for s in response.model_stats) == [
        ("add_sub", "1"),
        ("iris_classifier", "1"),
        ("iris_pipeline", "1"),
        ("iris_preprocess", "1"),
        ("text_upper", "1"),
        ("token_stream", "1"),
    ]


def test_model_statistics_unknown_model_is_not_available(channel: grpc.Channel) -> None:
    """Triton's TRITONSERVER_ServerModelStatistics: INVALID_ARGUMENT, its own text."""
    stub = pb_grpc.GRPCInferenceServiceStub(channel)
    with pytest.raises(grpc.RpcError) as info:
        stub.ModelStatistics(pb.ModelStatisticsRequest(name="no_such_model"), timeout=5)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert info.value.details() == "requested model 'no_such_model' is not available"


def test_implemented_rpc_still_works(channel: grpc.Channel) -> None:
    stub = pb_grpc.GRPCInferenceServiceStub(channel)
    assert stub.ServerLive(pb.ServerLiveRequest(), timeout=5).live
    assert stub.ServerReady(pb.ServerReadyRequest(), timeout=5).ready


# --------------------------------------------------------------------------- shutdown (last)


def test_stop_exits_zero(server: ServerProcess, channel: grpc.Channel) -> None:
    code = server.stop()
    assert code == 0, f"server exited with {code}:\n{server.log}"
    assert "server stopped" in server.log
