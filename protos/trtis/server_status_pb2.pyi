from trtis import model_config_pb2 as _model_config_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ModelReadyState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MODEL_UNKNOWN: _ClassVar[ModelReadyState]
    MODEL_READY: _ClassVar[ModelReadyState]
    MODEL_UNAVAILABLE: _ClassVar[ModelReadyState]
    MODEL_LOADING: _ClassVar[ModelReadyState]
    MODEL_UNLOADING: _ClassVar[ModelReadyState]

class ServerReadyState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SERVER_INVALID: _ClassVar[ServerReadyState]
    SERVER_INITIALIZING: _ClassVar[ServerReadyState]
    SERVER_READY: _ClassVar[ServerReadyState]
    SERVER_EXITING: _ClassVar[ServerReadyState]
    SERVER_FAILED_TO_INITIALIZE: _ClassVar[ServerReadyState]
MODEL_UNKNOWN: ModelReadyState
MODEL_READY: ModelReadyState
MODEL_UNAVAILABLE: ModelReadyState
MODEL_LOADING: ModelReadyState
MODEL_UNLOADING: ModelReadyState
SERVER_INVALID: ServerReadyState
SERVER_INITIALIZING: ServerReadyState
SERVER_READY: ServerReadyState
SERVER_EXITING: ServerReadyState
SERVER_FAILED_TO_INITIALIZE: ServerReadyState

class StatDuration(_message.Message):
    __slots__ = ("count", "total_time_ns")
    COUNT_FIELD_NUMBER: _ClassVar[int]
    TOTAL_TIME_NS_FIELD_NUMBER: _ClassVar[int]
    count: int
    total_time_ns: int
    def __init__(self, count: _Optional[int] = ..., total_time_ns: _Optional[int] = ...) -> None: ...

class StatusRequestStats(_message.Message):
    __slots__ = ("success",)
    SUCCESS_FIELD_NUMBER: _ClassVar[int]
    success: StatDuration
    def __init__(self, success: _Optional[_Union[StatDuration, _Mapping]] = ...) -> None: ...

class HealthRequestStats(_message.Message):
    __slots__ = ("success",)
    SUCCESS_FIELD_NUMBER: _ClassVar[int]
    success: StatDuration
    def __init__(self, success: _Optional[_Union[StatDuration, _Mapping]] = ...) -> None: ...

class ModelControlRequestStats(_message.Message):
    __slots__ = ("success",)
    SUCCESS_FIELD_NUMBER: _ClassVar[int]
    success: StatDuration
    def __init__(self, success: _Optional[_Union[StatDuration, _Mapping]] = ...) -> None: ...

class SharedMemoryControlRequestStats(_message.Message):
    __slots__ = ("success",)
    SUCCESS_FIELD_NUMBER: _ClassVar[int]
    success: StatDuration
    def __init__(self, success: _Optional[_Union[StatDuration, _Mapping]] = ...) -> None: ...

class RepositoryRequestStats(_message.Message):
    __slots__ = ("success",)
    SUCCESS_FIELD_NUMBER: _ClassVar[int]
    success: StatDuration
    def __init__(self, success: _Optional[_Union[StatDuration, _Mapping]] = ...) -> None: ...

class InferRequestStats(_message.Message):
    __slots__ = ("success", "failed", "compute", "queue")
    SUCCESS_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    COMPUTE_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    success: StatDuration
    failed: StatDuration
    compute: StatDuration
    queue: StatDuration
    def __init__(self, success: _Optional[_Union[StatDuration, _Mapping]] = ..., failed: _Optional[_Union[StatDuration, _Mapping]] = ..., compute: _Optional[_Union[StatDuration, _Mapping]] = ..., queue: _Optional[_Union[StatDuration, _Mapping]] = ...) -> None: ...

class ModelReadyStateReason(_message.Message):
    __slots__ = ("message",)
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    message: str
    def __init__(self, message: _Optional[str] = ...) -> None: ...

class ModelVersionStatus(_message.Message):
    __slots__ = ("ready_state", "ready_state_reason", "infer_stats", "model_execution_count", "model_inference_count", "last_inference_timestamp_milliseconds")
    class InferStatsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: InferRequestStats
        def __init__(self, key: _Optional[int] = ..., value: _Optional[_Union[InferRequestStats, _Mapping]] = ...) -> None: ...
    READY_STATE_FIELD_NUMBER: _ClassVar[int]
    READY_STATE_REASON_FIELD_NUMBER: _ClassVar[int]
    INFER_STATS_FIELD_NUMBER: _ClassVar[int]
    MODEL_EXECUTION_COUNT_FIELD_NUMBER: _ClassVar[int]
    MODEL_INFERENCE_COUNT_FIELD_NUMBER: _ClassVar[int]
    LAST_INFERENCE_TIMESTAMP_MILLISECONDS_FIELD_NUMBER: _ClassVar[int]
    ready_state: ModelReadyState
    ready_state_reason: ModelReadyStateReason
    infer_stats: _containers.MessageMap[int, InferRequestStats]
    model_execution_count: int
    model_inference_count: int
    last_inference_timestamp_milliseconds: int
    def __init__(self, ready_state: _Optional[_Union[ModelReadyState, str]] = ..., ready_state_reason: _Optional[_Union[ModelReadyStateReason, _Mapping]] = ..., infer_stats: _Optional[_Mapping[int, InferRequestStats]] = ..., model_execution_count: _Optional[int] = ..., model_inference_count: _Optional[int] = ..., last_inference_timestamp_milliseconds: _Optional[int] = ...) -> None: ...

class ModelStatus(_message.Message):
    __slots__ = ("config", "version_status")
    class VersionStatusEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: ModelVersionStatus
        def __init__(self, key: _Optional[int] = ..., value: _Optional[_Union[ModelVersionStatus, _Mapping]] = ...) -> None: ...
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    VERSION_STATUS_FIELD_NUMBER: _ClassVar[int]
    config: _model_config_pb2.ModelConfig
    version_status: _containers.MessageMap[int, ModelVersionStatus]
    def __init__(self, config: _Optional[_Union[_model_config_pb2.ModelConfig, _Mapping]] = ..., version_status: _Optional[_Mapping[int, ModelVersionStatus]] = ...) -> None: ...

class SharedMemoryRegion(_message.Message):
    __slots__ = ("name", "system_shared_memory", "cuda_shared_memory", "byte_size")
    class SystemSharedMemory(_message.Message):
        __slots__ = ("shared_memory_key", "offset")
        SHARED_MEMORY_KEY_FIELD_NUMBER: _ClassVar[int]
        OFFSET_FIELD_NUMBER: _ClassVar[int]
        shared_memory_key: str
        offset: int
        def __init__(self, shared_memory_key: _Optional[str] = ..., offset: _Optional[int] = ...) -> None: ...
    class CudaSharedMemory(_message.Message):
        __slots__ = ("device_id",)
        DEVICE_ID_FIELD_NUMBER: _ClassVar[int]
        device_id: int
        def __init__(self, device_id: _Optional[int] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    SYSTEM_SHARED_MEMORY_FIELD_NUMBER: _ClassVar[int]
    CUDA_SHARED_MEMORY_FIELD_NUMBER: _ClassVar[int]
    BYTE_SIZE_FIELD_NUMBER: _ClassVar[int]
    name: str
    system_shared_memory: SharedMemoryRegion.SystemSharedMemory
    cuda_shared_memory: SharedMemoryRegion.CudaSharedMemory
    byte_size: int
    def __init__(self, name: _Optional[str] = ..., system_shared_memory: _Optional[_Union[SharedMemoryRegion.SystemSharedMemory, _Mapping]] = ..., cuda_shared_memory: _Optional[_Union[SharedMemoryRegion.CudaSharedMemory, _Mapping]] = ..., byte_size: _Optional[int] = ...) -> None: ...

class ServerStatus(_message.Message):
    __slots__ = ("id", "version", "ready_state", "uptime_ns", "model_status", "status_stats", "health_stats", "model_control_stats", "shm_control_stats", "repository_stats")
    class ModelStatusEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: ModelStatus
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[ModelStatus, _Mapping]] = ...) -> None: ...
    ID_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    READY_STATE_FIELD_NUMBER: _ClassVar[int]
    UPTIME_NS_FIELD_NUMBER: _ClassVar[int]
    MODEL_STATUS_FIELD_NUMBER: _ClassVar[int]
    STATUS_STATS_FIELD_NUMBER: _ClassVar[int]
    HEALTH_STATS_FIELD_NUMBER: _ClassVar[int]
    MODEL_CONTROL_STATS_FIELD_NUMBER: _ClassVar[int]
    SHM_CONTROL_STATS_FIELD_NUMBER: _ClassVar[int]
    REPOSITORY_STATS_FIELD_NUMBER: _ClassVar[int]
    id: str
    version: str
    ready_state: ServerReadyState
    uptime_ns: int
    model_status: _containers.MessageMap[str, ModelStatus]
    status_stats: StatusRequestStats
    health_stats: HealthRequestStats
    model_control_stats: ModelControlRequestStats
    shm_control_stats: SharedMemoryControlRequestStats
    repository_stats: RepositoryRequestStats
    def __init__(self, id: _Optional[str] = ..., version: _Optional[str] = ..., ready_state: _Optional[_Union[ServerReadyState, str]] = ..., uptime_ns: _Optional[int] = ..., model_status: _Optional[_Mapping[str, ModelStatus]] = ..., status_stats: _Optional[_Union[StatusRequestStats, _Mapping]] = ..., health_stats: _Optional[_Union[HealthRequestStats, _Mapping]] = ..., model_control_stats: _Optional[_Union[ModelControlRequestStats, _Mapping]] = ..., shm_control_stats: _Optional[_Union[SharedMemoryControlRequestStats, _Mapping]] = ..., repository_stats: _Optional[_Union[RepositoryRequestStats, _Mapping]] = ...) -> None: ...

class SharedMemoryStatus(_message.Message):
    __slots__ = ("shared_memory_region",)
    SHARED_MEMORY_REGION_FIELD_NUMBER: _ClassVar[int]
    shared_memory_region: _containers.RepeatedCompositeFieldContainer[SharedMemoryRegion]
    def __init__(self, shared_memory_region: _Optional[_Iterable[_Union[SharedMemoryRegion, _Mapping]]] = ...) -> None: ...

class ModelRepositoryIndex(_message.Message):
    __slots__ = ("models",)
    class ModelEntry(_message.Message):
        __slots__ = ("name",)
        NAME_FIELD_NUMBER: _ClassVar[int]
        name: str
        def __init__(self, name: _Optional[str] = ...) -> None: ...
    MODELS_FIELD_NUMBER: _ClassVar[int]
    models: _containers.RepeatedCompositeFieldContainer[ModelRepositoryIndex.ModelEntry]
    def __init__(self, models: _Optional[_Iterable[_Union[ModelRepositoryIndex.ModelEntry, _Mapping]]] = ...) -> None: ...
