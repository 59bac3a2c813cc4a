"""The v1 service on the real server's gRPC port: reflection describes it as generated."""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import pytest
from google.protobuf.descriptor_pool import DescriptorPool
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
    ProtoReflectionDescriptorDatabase,
)
from server_process import ServerProcess

from trtis import grpc_service_pb2 as gs

V1_SERVICE = "nvidia.inferenceserver.GRPCService"


@pytest.fixture(scope="module")
def channel() -> Iterator[grpc.Channel]:
    with ServerProcess() as server, grpc.insecure_channel(server.url) as chan:
        grpc.channel_ready_future(chan).result(timeout=10)
        yield chan


def test_reflection_lists_and_describes_the_v1_service(channel: grpc.Channel) -> None:
    db = ProtoReflectionDescriptorDatabase(channel)
    assert {V1_SERVICE, "inference.GRPCInferenceService"} <= set(db.get_services())
    service = DescriptorPool(db).FindServiceByName(V1_SERVICE)
    ours = gs.DESCRIPTOR.services_by_name["GRPCService"]
    assert [m.name for m in service.methods] == [m.name for m in ours.methods]
    for method in service.methods:
        expected = ours.methods_by_name[method.name]
        assert method.input_type.full_name == expected.input_type.full_name
        assert method.output_type.full_name == expected.output_type.full_name
        assert (method.client_streaming, method.server_streaming) == (
            expected.client_streaming,
            expected.server_streaming,
        )
    header = service.methods_by_name["Infer"].input_type.fields_by_name["meta_data"].message_type
    assert header.full_name == "nvidia.inferenceserver.InferRequestHeader"
    assert [(f.name, f.number) for f in header.fields] == [
        ("id", 5),
        ("flags", 6),
        ("correlation_id", 4),
        ("batch_size", 1),
        ("input", 2),
        ("output", 3),
    ]


def test_v1_health_answers_in_band(channel: grpc.Channel) -> None:
    call = channel.unary_unary(
        f"/{V1_SERVICE}/Health",
        request_serializer=gs.HealthRequest.SerializeToString,
        response_deserializer=gs.HealthResponse.FromString,
    )
    live = call(gs.HealthRequest(mode="live"), timeout=10)
    assert live.health and live.request_status.server_id == "inference:0"
    bad = call(gs.HealthRequest(mode="sideways"), timeout=10)
    assert not bad.health
    assert bad.request_status.msg == "unknown health mode 'sideways'"


def test_v1_reports_the_id_flag_when_given() -> None:
    """--id replaces the 1.11 default "inference:0" in every v1 RequestStatus and Status."""
    with (
        ServerProcess(extra_args=["--id", "edge-7"]) as server,
        grpc.insecure_channel(server.url) as chan,
    ):
        status = chan.unary_unary(
            f"/{V1_SERVICE}/Status",
            request_serializer=gs.StatusRequest.SerializeToString,
            response_deserializer=gs.StatusResponse.FromString,
        )(gs.StatusRequest(model_name="add_sub"), timeout=10)
    assert status.request_status.server_id == "edge-7"
    assert status.server_status.id == "edge-7"
