"""Predicates on message descriptors shared by the JSON mapping and the OpenAPI schemas.

They name the few message shapes that Triton's REST API writes differently from proto3
JSON, so both modules agree on them.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "PARAMETER_ONEOF",
    "DescriptorT",
    "FieldT",
    "is_map",
    "is_parameter",
    "is_repeated",
    "value_list_field",
]

#: protobuf's stubs type upb and pure-Python descriptors as unrelated classes, so the
#: descriptor-walking code takes them untyped.
DescriptorT = Any
FieldT = Any

#: The oneof of Triton's parameter messages (InferParameter, ModelRepositoryParameter, ...).
PARAMETER_ONEOF = "parameter_choice"


def is_repeated(fd: FieldT) -> bool:
    return bool(fd.is_repeated)


def is_map(fd: FieldT) -> bool:
    return bool(
        is_repeated(fd) and fd.message_type is not None and fd.message_type.GetOptions().map_entry
    )


def is_parameter(desc: DescriptorT) -> bool:
    """A message that is one scalar of several types: written as a bare JSON scalar."""
    return PARAMETER_ONEOF in desc.oneofs_by_name and len(desc.oneofs) == 1


_MODEL_CONFIG_FILE = "inference/model_config.proto"


def value_list_field(desc: DescriptorT) -> FieldT | None:
    """The field of a message that is only a list of scalars (trace setting values).

    Not in a model config: Triton writes it with protobuf's JSON mapping, so a reshape is
    ``{"shape": [2, 2]}`` and a specific version policy ``{"versions": [1]}``."""
    if desc.file.name == _MODEL_CONFIG_FILE:
        return None
    if len(desc.fields) == 1:
        fd = desc.fields[0]
        if is_repeated(fd) and fd.message_type is None:
            return fd
    return None
