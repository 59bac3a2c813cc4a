"""Server reflection under both names clients ask for: ``grpc.reflection.v1`` and the
older ``grpc.reflection.v1alpha``.

grpcio-reflection implements only v1alpha. The two protocols are the same messages under
another package (identical field numbers), so v1 is served by the same servicer through a
generic handler with v1alpha's (de)serializers, and a v1 copy of the v1alpha file
descriptor is added to the descriptor pool so that v1 itself can be described.

Symbols resolve as in grpc's C++ reflection (``DescriptorPool::FindFileContainingSymbol``):
services, messages (nested too), fields, oneofs, enums, enum values, and methods. The
Python pool (upb) knows all but methods, so ``grpcurl describe Service.Method`` answered
"Symbol not found"; ``_SymbolPool`` adds them. Every answer carries the file and the files
it depends on, transitively; an unknown name is an error response with NOT_FOUND.
"""

from __future__ import annotations

from typing import Any

import grpc
from google.protobuf import descriptor, descriptor_pb2, descriptor_pool
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


class _SymbolPool:
    """The pool the reflection servicer reads (it calls only these five), with a
    service's methods as symbols: ``<package>.<Service>.<Method>`` is in the service's file."""

    def __init__(self, pool: descriptor_pool.DescriptorPool) -> None:
        self._pool = pool

    def FindFileContainingSymbol(self, symbol: str) -> descriptor.FileDescriptor:
        try:
            return self._pool.FindFileContainingSymbol(symbol)
        except KeyError:
            service_name, _, method = symbol.rpartition(".")
            try:
                service = self._pool.FindServiceByName(service_name)
            except KeyError:
                service = None
            if service is None or method not in service.methods_by_name:
                raise
            return service.file

    def FindFileByName(self, name: str) -> descriptor.FileDescriptor:
        return self._pool.FindFileByName(name)

    def FindMessageTypeByName(self, name: str) -> descriptor.Descriptor:
        return self._pool.FindMessageTypeByName(name)

    def FindExtensionByNumber(
        self, message: descriptor.Descriptor, number: int
    ) -> descriptor.FieldDescriptor:
        return self._pool.FindExtensionByNumber(message, number)

    def FindAllExtensions(self, message: descriptor.Descriptor) -> list[descriptor.FieldDescriptor]:
        return self._pool.FindAllExtensions(message)


def enable_reflection(service_names: tuple[str, ...], server: grpc.aio.Server) -> None:
    """Serve reflection for ``service_names`` (both reflection services are added)."""
    pool = descriptor_pool.Default()
    _add_v1_descriptor(pool)
    names = (*service_names, V1_SERVICE_NAME, reflection.SERVICE_NAME)
    servicer = reflection.aio.ReflectionServicer(  # type: ignore[attr-defined]
        names, pool=_SymbolPool(pool)
    )
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
