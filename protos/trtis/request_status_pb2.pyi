from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class RequestStatusCode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    INVALID: _ClassVar[RequestStatusCode]
    SUCCESS: _ClassVar[RequestStatusCode]
    UNKNOWN: _ClassVar[RequestStatusCode]
    INTERNAL: _ClassVar[RequestStatusCode]
    NOT_FOUND: _ClassVar[RequestStatusCode]
    INVALID_ARG: _ClassVar[RequestStatusCode]
    UNAVAILABLE: _ClassVar[RequestStatusCode]
    UNSUPPORTED: _ClassVar[RequestStatusCode]
    ALREADY_EXISTS: _ClassVar[RequestStatusCode]
INVALID: RequestStatusCode
SUCCESS: RequestStatusCode
UNKNOWN: RequestStatusCode
INTERNAL: RequestStatusCode
NOT_FOUND: RequestStatusCode
INVALID_ARG: RequestStatusCode
UNAVAILABLE: RequestStatusCode
UNSUPPORTED: RequestStatusCode
ALREADY_EXISTS: RequestStatusCode

class RequestStatus(_message.Message):
    __slots__ = ("code", "msg", "server_id", "request_id")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MSG_FIELD_NUMBER: _ClassVar[int]
    SERVER_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    code: RequestStatusCode
    msg: str
    server_id: str
    request_id: int
    def __init__(self, code: _Optional[_Union[RequestStatusCode, str]] = ..., msg: _Optional[str] = ..., server_id: _Optional[str] = ..., request_id: _Optional[int] = ...) -> None: ...
