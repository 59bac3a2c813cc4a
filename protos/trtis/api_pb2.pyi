from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class InferSharedMemory(_message.Message):
    __slots__ = ("name", "offset", "byte_size")
    NAME_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    BYTE_SIZE_FIELD_NUMBER: _ClassVar[int]
    name: str
    offset: int
    byte_size: int
    def __init__(self, name: _Optional[str] = ..., offset: _Optional[int] = ..., byte_size: _Optional[int] = ...) -> None: ...

class InferRequestHeader(_message.Message):
    __slots__ = ("id", "flags", "correlation_id", "batch_size", "input", "output")
    class Flag(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        FLAG_NONE: _ClassVar[InferRequestHeader.Flag]
        FLAG_SEQUENCE_START: _ClassVar[InferRequestHeader.Flag]
        FLAG_SEQUENCE_END: _ClassVar[InferRequestHeader.Flag]
    FLAG_NONE: InferRequestHeader.Flag
    FLAG_SEQUENCE_START: InferRequestHeader.Flag
    FLAG_SEQUENCE_END: InferRequestHeader.Flag
    class Input(_message.Message):
        __slots__ = ("name", "dims", "batch_byte_size", "shared_memory")
        NAME_FIELD_NUMBER: _ClassVar[int]
        DIMS_FIELD_NUMBER: _ClassVar[int]
        BATCH_BYTE_SIZE_FIELD_NUMBER: _ClassVar[int]
        SHARED_MEMORY_FIELD_NUMBER: _ClassVar[int]
        name: str
        dims: _containers.RepeatedScalarFieldContainer[int]
        batch_byte_size: int
        shared_memory: InferSharedMemory
        def __init__(self, name: _Optional[str] = ..., dims: _Optional[_Iterable[int]] = ..., batch_byte_size: _Optional[int] = ..., shared_memory: _Optional[_Union[InferSharedMemory, _Mapping]] = ...) -> None: ...
    class Output(_message.Message):
        __slots__ = ("name", "cls", "shared_memory")
        class Class(_message.Message):
            __slots__ = ("count",)
            COUNT_FIELD_NUMBER: _ClassVar[int]
            count: int
            def __init__(self, count: _Optional[int] = ...) -> None: ...
        NAME_FIELD_NUMBER: _ClassVar[int]
        CLS_FIELD_NUMBER: _ClassVar[int]
        SHARED_MEMORY_FIELD_NUMBER: _ClassVar[int]
        name: str
        cls: InferRequestHeader.Output.Class
        shared_memory: InferSharedMemory
        def __init__(self, name: _Optional[str] = ..., cls: _Optional[_Union[InferRequestHeader.Output.Class, _Mapping]] = ..., shared_memory: _Optional[_Union[InferSharedMemory, _Mapping]] = ...) -> None: ...
    ID_FIELD_NUMBER: _ClassVar[int]
    FLAGS_FIELD_NUMBER: _ClassVar[int]
    CORRELATION_ID_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    id: int
    flags: int
    correlation_id: int
    batch_size: int
    input: _containers.RepeatedCompositeFieldContainer[InferRequestHeader.Input]
    output: _containers.RepeatedCompositeFieldContainer[InferRequestHeader.Output]
    def __init__(self, id: _Optional[int] = ..., flags: _Optional[int] = ..., correlation_id: _Optional[int] = ..., batch_size: _Optional[int] = ..., input: _Optional[_Iterable[_Union[InferRequestHeader.Input, _Mapping]]] = ..., output: _Optional[_Iterable[_Union[InferRequestHeader.Output, _Mapping]]] = ...) -> None: ...

class InferResponseHeader(_message.Message):
    __slots__ = ("id", "model_name", "model_version", "batch_size", "output")
    class Output(_message.Message):
        __slots__ = ("name", "raw", "batch_classes")
        class Raw(_message.Message):
            __slots__ = ("dims", "batch_byte_size")
            DIMS_FIELD_NUMBER: _ClassVar[int]
            BATCH_BYTE_SIZE_FIELD_NUMBER: _ClassVar[int]
            dims: _containers.RepeatedScalarFieldContainer[int]
            batch_byte_size: int
            def __init__(self, dims: _Optional[_Iterable[int]] = ..., batch_byte_size: _Optional[int] = ...) -> None: ...
        class Class(_message.Message):
            __slots__ = ("idx", "value", "label")
            IDX_FIELD_NUMBER: _ClassVar[int]
            VALUE_FIELD_NUMBER: _ClassVar[int]
            LABEL_FIELD_NUMBER: _ClassVar[int]
            idx: int
            value: float
            label: str
            def __init__(self, idx: _Optional[int] = ..., value: _Optional[float] = ..., label: _Optional[str] = ...) -> None: ...
        class Classes(_message.Message):
            __slots__ = ("cls",)
            CLS_FIELD_NUMBER: _ClassVar[int]
            cls: _containers.RepeatedCompositeFieldContainer[InferResponseHeader.Output.Class]
            def __init__(self, cls: _Optional[_Iterable[_Union[InferResponseHeader.Output.Class, _Mapping]]] = ...) -> None: ...
        NAME_FIELD_NUMBER: _ClassVar[int]
        RAW_FIELD_NUMBER: _ClassVar[int]
        BATCH_CLASSES_FIELD_NUMBER: _ClassVar[int]
        name: str
        raw: InferResponseHeader.Output.Raw
        batch_classes: _containers.RepeatedCompositeFieldContainer[InferResponseHeader.Output.Classes]
        def __init__(self, name: _Optional[str] = ..., raw: _Optional[_Union[InferResponseHeader.Output.Raw, _Mapping]] = ..., batch_classes: _Optional[_Iterable[_Union[InferResponseHeader.Output.Classes, _Mapping]]] = ...) -> None: ...
    ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_NAME_FIELD_NUMBER: _ClassVar[int]
    MODEL_VERSION_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    id: int
    model_name: str
    model_version: int
    batch_size: int
    output: _containers.RepeatedCompositeFieldContainer[InferResponseHeader.Output]
    def __init__(self, id: _Optional[int] = ..., model_name: _Optional[str] = ..., model_version: _Optional[int] = ..., batch_size: _Optional[int] = ..., output: _Optional[_Iterable[_Union[InferResponseHeader.Output, _Mapping]]] = ...) -> None: ...
