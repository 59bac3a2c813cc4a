from google.protobuf import descriptor_pb2 as _descriptor_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class HttpCodec(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    HTTP_CODEC_UNSPECIFIED: _ClassVar[HttpCodec]
    HTTP_CODEC_STATUS: _ClassVar[HttpCodec]
    HTTP_CODEC_INFER: _ClassVar[HttpCodec]
    HTTP_CODEC_GENERATE: _ClassVar[HttpCodec]
    HTTP_CODEC_V1: _ClassVar[HttpCodec]
HTTP_CODEC_UNSPECIFIED: HttpCodec
HTTP_CODEC_STATUS: HttpCodec
HTTP_CODEC_INFER: HttpCodec
HTTP_CODEC_GENERATE: HttpCodec
HTTP_CODEC_V1: HttpCodec
HTTP_ROUTE_FIELD_NUMBER: _ClassVar[int]
http_route: _descriptor.FieldDescriptor

class HttpRoute(_message.Message):
    __slots__ = ("get", "post", "body", "additional_bindings", "codec", "response_body", "status_field", "false_error", "omit_defaults", "map_values", "server_sent_events")
    GET_FIELD_NUMBER: _ClassVar[int]
    POST_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    ADDITIONAL_BINDINGS_FIELD_NUMBER: _ClassVar[int]
    CODEC_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_BODY_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_FIELD_NUMBER: _ClassVar[int]
    FALSE_ERROR_FIELD_NUMBER: _ClassVar[int]
    OMIT_DEFAULTS_FIELD_NUMBER: _ClassVar[int]
    MAP_VALUES_FIELD_NUMBER: _ClassVar[int]
    SERVER_SENT_EVENTS_FIELD_NUMBER: _ClassVar[int]
    get: str
    post: str
    body: str
    additional_bindings: _containers.RepeatedCompositeFieldContainer[HttpRoute]
    codec: HttpCodec
    response_body: str
    status_field: str
    false_error: str
    omit_defaults: bool
    map_values: bool
    server_sent_events: bool
    def __init__(self, get: _Optional[str] = ..., post: _Optional[str] = ..., body: _Optional[str] = ..., additional_bindings: _Optional[_Iterable[_Union[HttpRoute, _Mapping]]] = ..., codec: _Optional[_Union[HttpCodec, str]] = ..., response_body: _Optional[str] = ..., status_field: _Optional[str] = ..., false_error: _Optional[str] = ..., omit_defaults: _Optional[bool] = ..., map_values: _Optional[bool] = ..., server_sent_events: _Optional[bool] = ...) -> None: ...
