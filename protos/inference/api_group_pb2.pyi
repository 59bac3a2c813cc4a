from google.protobuf import descriptor_pb2 as _descriptor_pb2
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from typing import ClassVar as _ClassVar

DESCRIPTOR: _descriptor.FileDescriptor

class ApiGroup(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    API_GROUP_UNSPECIFIED: _ClassVar[ApiGroup]
    API_GROUP_HEALTH: _ClassVar[ApiGroup]
    API_GROUP_METADATA: _ClassVar[ApiGroup]
    API_GROUP_INFERENCE: _ClassVar[ApiGroup]
    API_GROUP_SHARED_MEMORY: _ClassVar[ApiGroup]
    API_GROUP_MODEL_CONFIG: _ClassVar[ApiGroup]
    API_GROUP_MODEL_REPOSITORY: _ClassVar[ApiGroup]
    API_GROUP_STATISTICS: _ClassVar[ApiGroup]
    API_GROUP_TRACE: _ClassVar[ApiGroup]
    API_GROUP_LOGGING: _ClassVar[ApiGroup]
API_GROUP_UNSPECIFIED: ApiGroup
API_GROUP_HEALTH: ApiGroup
API_GROUP_METADATA: ApiGroup
API_GROUP_INFERENCE: ApiGroup
API_GROUP_SHARED_MEMORY: ApiGroup
API_GROUP_MODEL_CONFIG: ApiGroup
API_GROUP_MODEL_REPOSITORY: ApiGroup
API_GROUP_STATISTICS: ApiGroup
API_GROUP_TRACE: ApiGroup
API_GROUP_LOGGING: ApiGroup
API_GROUP_FIELD_NUMBER: _ClassVar[int]
api_group: _descriptor.FieldDescriptor
