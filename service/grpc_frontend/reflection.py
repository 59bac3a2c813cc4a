"""Server reflection under both names clients ask for: ``grpc.reflection.v1`` and the
older ``grpc.reflection.v1alpha``.

grpcio-reflection implements only v1alpha. The two protocols are the same messages under
another package (identical field numbers), so v1 is served by the same servicer through a
generic handler with v1alpha's (de)serializers, and a v1 copy of the v1alpha file
descriptor is added to the descriptor pool so that v1 itself can be described.
"""

from __future__ import annotations

from typing import Any

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool
from grpc_reflection.v1alpha import reflection, reflection_pb2

from .registration import add_service, parser, refusing_malformed

__all__ = ["V1_SERVICE_NAME", "enable_reflection"]

_ALPHA = "grpc.reflection.v1alpha"
_V1 = "grpc.reflection.v1"
V1_SERVICE_NAME = f"{_V1}.ServerReflection"
_V1_FILE = "grpc/reflection/v1/reflection.proto"
_ALPHA_SERVICE = reflection_pb2.DESCRIPTOR.services_by_name["ServerReflection"]


def _add_v1_descriptor(pool: descriptor_pool.DescriptorPool) -> None:
    """Register ``grpc/reflection/v1/reflection.proto`` (the v1alpha file, renamed)."""
    try:
        pool.FindFileByName(_V1_FILE)
        return
    except KeyError:
        pass
    proto = descriptor_pb2.FileDescriptorProto()
    reflection_pb2.DESCRIPTOR.CopyToProto(proto)
    proto.name = _V1_FILE
    proto.package = _V1
    for message in proto.message_type:
        for field in message.field:
            if field.type_name.startswith(f".{_ALPHA}."):
                field.type_name = f".{_V1}." + field.type_name.removeprefix(f".{_ALPHA}.")
    for service in proto.service:
        for method in service.method:
            method.input_type = method.input_type.replace(f".{_ALPHA}.", f".{_V1}.")
            method.output_type = method.output_type.replace(f".{_ALPHA}.", f".{_V1}.")
    pool.Add(proto)


def enable_reflection(service_names: tuple[str, ...], server: grpc.aio.Server) -> None:
    """Serve reflection for ``service_names`` (both reflection services are added)."""
    _add_v1_descriptor(descriptor_pool.Default())
    names = (*service_names, V1_SERVICE_NAME, reflection.SERVICE_NAME)
    servicer = reflection.aio.ReflectionServicer(names)  # type: ignore[attr-defined]
    # Registered through wire.py: bytes that do not parse get INVALID_ARGUMENT.
    add_service(server, _ALPHA_SERVICE, servicer, checks_own=False)
    handler: Any = grpc.stream_stream_rpc_method_handler(
        refusing_malformed(
            _ALPHA_SERVICE.methods_by_name["ServerReflectionInfo"], servicer.ServerReflectionInfo
        ),
        request_deserializer=parser(reflection_pb2.ServerReflectionRequest),
        response_serializer=reflection_pb2.ServerReflectionResponse.SerializeToString,
    )
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(V1_SERVICE_NAME, {"ServerReflectionInfo": handler}),)
    )
