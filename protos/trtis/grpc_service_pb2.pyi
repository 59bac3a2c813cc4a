from inference import api_group_pb2 as _api_group_pb2
from inference import http_route_pb2 as _http_route_pb2
from trtis import api_pb2 as _api_pb2
from trtis import request_status_pb2 as _request_status_pb2
from trtis import server_status_pb2 as _server_status_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class StatusRequest(_message.Message):
    __slots__ = ("model_name",)
    MODEL_NAME_FIELD_NUMBER: _ClassVar[int]
    model_name: str
    def __init__(self, model_name: _Optional[str] = ...) -> None: ...

class StatusResponse(_message.Message):
    __slots__ = ("request_status", "server_status")
    REQUEST_STATUS_FIELD_NUMBER: _ClassVar[int]
    SERVER_STATUS_FIELD_NUMBER: _ClassVar[int]
    request_status: _request_status_pb2.RequestStatus
    server_status: _server_status_pb2.ServerStatus
    def __init__(self, request_status: _Optional[_Union[_request_status_pb2.RequestStatus, _Mapping]] = ..., server_status: _Optional[_Union[_server_status_pb2.ServerStatus, _Mapping]] = ...) -> None: ...

class HealthRequest(_message.Message):
    __slots__ = ("mode",)
    MODE_FIELD_NUMBER: _ClassVar[int]
    mode: str
    def __init__(self, mode: _Optional[str] = ...) -> None: ...

class HealthResponse(_message.Message):
    __slots__ = ("request_status", "health")
    REQUEST_STATUS_FIELD_NUMBER: _ClassVar[int]
    HEALTH_FIELD_NUMBER: _ClassVar[int]
    request_status: _request_status_pb2.RequestStatus
    health: bool
    def __init__(self, request_status: _Optional[_Union[_request_status_pb2.RequestStatus, _Mapping]] = ..., health: _Optional[bool] = ...) -> None: ...

class ModelControlRequest(_message.Message):
    __slots__ = ("model_name", "type")
    class Type(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        UNLOAD: _ClassVar[ModelControlRequest.Type]
        LOAD: _ClassVar[ModelControlRequest.Type]
    UNLOAD: ModelControlRequest.Type
    LOAD: ModelControlRequest.Type
    MODEL_NAME_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    model_name: str
    type: ModelControlRequest.Type
    def __init__(self, model_name: _Optional[str] = ..., type: _Optional[_Union[ModelControlRequest.Type, str]] = ...) -> None: ...

class ModelControlResponse(_message.Message):
    __slots__ = ("request_status",)
    REQUEST_STATUS_FIELD_NUMBER: _ClassVar[int]
    request_status: _request_status_pb2.RequestStatus
    def __init__(self, request_status: _Optional[_Union[_request_status_pb2.RequestStatus, _Mapping]] = ...) -> None: ...

class SharedMemoryControlRequest(_message.Message):
    __slots__ = ("register", "unregister", "unregister_all", "status")
    class Register(_message.Message):
        __slots__ = ("name", "system_shared_memory", "cuda_shared_memory", "byte_size")
        class SystemSharedMemoryIdentifier(_message.Message):
            __slots__ = ("shared_memory_key", "offset")
            SHARED_MEMORY_KEY_FIELD_NUMBER: _ClassVar[int]
            OFFSET_FIELD_NUMBER: _ClassVar[int]
            shared_memory_key: str
            offset: int
            def __init__(self, shared_memory_key: _Optional[str] = ..., offset: _Optional[int] = ...) -> None: ...
        class CUDASharedMemoryIdentifier(_message.Message):
            __slots__ = ("raw_handle", "device_id")
            RAW_HANDLE_FIELD_NUMBER: _ClassVar[int]
            DEVICE_ID_FIELD_NUMBER: _ClassVar[int]
            raw_handle: bytes
            device_id: int
            def __init__(self, raw_handle: _Optional[bytes] = ..., device_id: _Optional[int] = ...) -> None: ...
        NAME_FIELD_NUMBER: _ClassVar[int]
        SYSTEM_SHARED_MEMORY_FIELD_NUMBER: _ClassVar[int]
        CUDA_SHARED_MEMORY_FIELD_NUMBER: _ClassVar[int]
        BYTE_SIZE_FIELD_NUMBER: _ClassVar[int]
        name: str
        system_shared_memory: SharedMemoryControlRequest.Register.SystemSharedMemoryIdentifier
        cuda_shared_memory: SharedMemoryControlRequest.Register.CUDASharedMemoryIdentifier
        byte_size: int
        def __init__(self, name: _Optional[str] = ..., system_shared_memory: _Optional[_Union[SharedMemoryControlRequest.Register.SystemSharedMemoryIdentifier, _Mapping]] = ..., cuda_shared_memory: _Optional[_Union[SharedMemoryControlRequest.Register.CUDASharedMemoryIdentifier, _Mapping]] = ..., byte_size: _Optional[int] = ...) -> None: ...
    class Unregister(_message.Message):
        __slots__ = ("name",)
        NAME_FIELD_NUMBER: _ClassVar[int]
        name: str
        def __init__(self, name: _Optional[str] = ...) -> None: ...
    class UnregisterAll(_message.Message):
        __slots__ = ()
        def __init__(self) -> None: ...
    class Status(_message.Message):
        __slots__ = ()
        def __init__(self) -> None: ...
    REGISTER_FIELD_NUMBER: _ClassVar[int]
    UNREGISTER_FIELD_NUMBER: _ClassVar[int]
    UNREGISTER_ALL_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    register: SharedMemoryControlRequest.Register
    unregister: SharedMemoryControlRequest.Unregister
    unregister_all: SharedMemoryControlRequest.UnregisterAll
    status: SharedMemoryControlRequest.Status
    def __init__(self, register: _Optional[_Union[SharedMemoryControlRequest.Register, _Mapping]] = ..., unregister: _Optional[_Union[SharedMemoryControlRequest.Unregister, _Mapping]] = ..., unregister_all: _Optional[_Union[SharedMemoryControlRequest.UnregisterAll, _Mapping]] = ..., status: _Optional[_Union[SharedMemoryControlRequest.Status, _Mapping]] = ...) -> None: ...

class SharedMemoryControlResponse(_message.Message):
    __slots__ = ("request_status", "shared_memory_status")
    class Status(_message.Message):
        __slots__ = ("shared_memory_region",)
        SHARED_MEMORY_REGION_FIELD_NUMBER: _ClassVar[int]
        shared_memory_region: _containers.RepeatedCompositeFieldContainer[_server_status_pb2.SharedMemoryRegion]
        def __init__(self, shared_memory_region: _Optional[_Iterable[_Union[_server_status_pb2.SharedMemoryRegion, _Mapping]]] = ...) -> None: ...
    REQUEST_STATUS_FIELD_NUMBER: _ClassVar[int]
    SHARED_MEMORY_STATUS_FIELD_NUMBER: _ClassVar[int]
    request_status: _request_status_pb2.RequestStatus
    shared_memory_status: SharedMemoryControlResponse.Status
    def __init__(self, request_status: _Optional[_Union[_request_status_pb2.RequestStatus, _Mapping]] = ..., shared_memory_status: _Optional[_Union[SharedMemoryControlResponse.Status, _Mapping]] = ...) -> None: ...

class InferRequest(_message.Message):
    __slots__ = ("model_name", "model_version", "meta_data", "raw_input")
    MODEL_NAME_FIELD_NUMBER: _ClassVar[int]
    MODEL_VERSION_FIELD_NUMBER: _ClassVar[int]
    META_DATA_FIELD_NUMBER: _ClassVar[int]
    RAW_INPUT_FIELD_NUMBER: _ClassVar[int]
    model_name: str
    model_version: int
    meta_data: _api_pb2.InferRequestHeader
    raw_input: _containers.RepeatedScalarFieldContainer[bytes]
    def __init__(self, model_name: _Optional[str] = ..., model_version: _Optional[int] = ..., meta_data: _Optional[_Union[_api_pb2.InferRequestHeader, _Mapping]] = ..., raw_input: _Optional[_Iterable[bytes]] = ...) -> None: ...

class InferResponse(_message.Message):
    __slots__ = ("request_status", "meta_data", "raw_output")
    REQUEST_STATUS_FIELD_NUMBER: _ClassVar[int]
    META_DATA_FIELD_NUMBER: _ClassVar[int]
    RAW_OUTPUT_FIELD_NUMBER: _ClassVar[int]
    request_status: _request_status_pb2.RequestStatus
    meta_data: _api_pb2.InferResponseHeader
    raw_output: _containers.RepeatedScalarFieldContainer[bytes]
    def __init__(self, request_status: _Optional[_Union[_request_status_pb2.RequestStatus, _Mapping]] = ..., meta_data: _Optional[_Union[_api_pb2.InferResponseHeader, _Mapping]] = ..., raw_output: _Optional[_Iterable[bytes]] = ...) -> None: ...

class RepositoryRequest(_message.Message):
    __slots__ = ("index",)
    INDEX_FIELD_NUMBER: _ClassVar[int]
    index: bool
    def __init__(self, index: _Optional[bool] = ...) -> None: ...

class RepositoryResponse(_message.Message):
    __slots__ = ("request_status", "index")
    REQUEST_STATUS_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    request_status: _request_status_pb2.RequestStatus
    index: _server_status_pb2.ModelRepositoryIndex
    def __init__(self, request_status: _Optional[_Union[_request_status_pb2.RequestStatus, _Mapping]] = ..., index: _Optional[_Union[_server_status_pb2.ModelRepositoryIndex, _Mapping]] = ...) -> None: ...
