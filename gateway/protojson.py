"""The generic JSON mapping of the plain RPCs (health, metadata, config, statistics,
repository, shared memory, trace, logging), driven by the message descriptors.

Written by hand rather than with ``json_format`` because Triton's REST shapes differ from
proto3 JSON in small, regular ways: proto field names, 64-bit integers as numbers, and
"parameter" messages (one ``parameter_choice`` oneof) as bare JSON scalars. Requests:
path variables and the JSON body fill the request message; unknown fields and values of
the wrong type are a 400 naming the field. Responses: fields without presence are always
written (as Triton's own JSON does) unless the route says ``omit_defaults``.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from google.protobuf import message_factory
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from .descriptors import (
    PARAMETER_ONEOF,
    DescriptorT,
    FieldT,
    is_map,
    is_parameter,
    is_repeated,
    value_list_field,
)
from .errors import GatewayError
from .routes import Binding, Route

__all__ = ["build_request", "render_response"]

FD = FieldDescriptor
_INTS = {
    FD.TYPE_INT32: (-(2**31), 2**31 - 1),
    FD.TYPE_SINT32: (-(2**31), 2**31 - 1),
    FD.TYPE_SFIXED32: (-(2**31), 2**31 - 1),
    FD.TYPE_INT64: (-(2**63), 2**63 - 1),
    FD.TYPE_SINT64: (-(2**63), 2**63 - 1),
    FD.TYPE_SFIXED64: (-(2**63), 2**63 - 1),
    FD.TYPE_UINT32: (0, 2**32 - 1),
    FD.TYPE_FIXED32: (0, 2**32 - 1),
    FD.TYPE_UINT64: (0, 2**64 - 1),
    FD.TYPE_FIXED64: (0, 2**64 - 1),
}
_FLOATS = (FD.TYPE_FLOAT, FD.TYPE_DOUBLE)
# Trace settings answer with this one key as a list and the others as strings (Triton).
_LIST_SETTINGS = frozenset({"trace_level"})


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__


# --------------------------------------------------------------------------- requests


def build_request(route: Route, binding: Binding, path: dict[str, str], body: Any) -> Message:
    """The RPC request from the path variables and the parsed JSON body (None: no body)."""
    request: Message = _message_class(route.input_type)()
    for name, value in path.items():
        setattr(request, name, value)
    if body is None or not binding.body:
        return request
    if binding.body != "*":
        _assign(request, route.input_type.fields_by_name[binding.body], body, binding.body)
        return request
    if not isinstance(body, dict):
        raise GatewayError(400, f"the request body must be a JSON object, got {_kind(body)}")
    for key, value in body.items():
        fd = route.input_type.fields_by_name.get(key)
        if fd is None or key in path:
            allowed = sorted(set(route.input_type.fields_by_name) - set(path))
            raise GatewayError(
                400, f"unknown field {key!r} in the request body; allowed: {allowed}"
            )
        _assign(request, fd, value, key)
    return request


def _message_class(desc: DescriptorT) -> type[Message]:
    return message_factory.GetMessageClass(desc)


def _fill(message: Message, value: Any, where: str, key: str = "") -> None:
    desc = message.DESCRIPTOR
    if is_parameter(desc):
        _set_parameter(message, value, where, key)
        return
    listed = value_list_field(desc)
    if listed is not None and not isinstance(value, dict):
        items = [] if value is None else value if isinstance(value, list) else [value]
        _assign(message, listed, items, where)
        return
    if value is None:
        return
    if not isinstance(value, dict):
        raise GatewayError(400, f"{where} must be a JSON object, got {_kind(value)}")
    for name, item in value.items():
        fd = desc.fields_by_name.get(name)
        if fd is None:
            raise GatewayError(
                400, f"unknown field {name!r} in {where}; allowed: {sorted(desc.fields_by_name)}"
            )
        _assign(message, fd, item, f"{where}.{name}")


def _assign(message: Message, fd: FieldT, value: Any, where: str) -> None:
    if is_map(fd):
        if not isinstance(value, dict):
            raise GatewayError(400, f"{where} must be a JSON object, got {_kind(value)}")
        target = getattr(message, fd.name)
        value_fd = fd.message_type.fields_by_name["value"]
        for key, item in value.items():
            if value_fd.message_type is not None:
                _fill(target[key], item, f"{where}[{key!r}]", key)
            else:
                target[key] = _scalar(value_fd, item, f"{where}[{key!r}]")
    elif is_repeated(fd):
        if not isinstance(value, list):
            raise GatewayError(400, f"{where} must be a JSON array, got {_kind(value)}")
        target = getattr(message, fd.name)
        for index, item in enumerate(value):
            if fd.message_type is not None:
                _fill(target.add(), item, f"{where}[{index}]")
            else:
                target.append(_scalar(fd, item, f"{where}[{index}]"))
    elif fd.message_type is not None:
        _fill(getattr(message, fd.name), value, where)
        getattr(message, fd.name).SetInParent()
    elif value is not None:
        setattr(message, fd.name, _scalar(fd, value, where))


def _scalar(fd: FieldT, value: Any, where: str) -> Any:
    kind = fd.type
    if kind == FD.TYPE_BOOL and isinstance(value, bool):
        return value
    if kind in _INTS and isinstance(value, int) and not isinstance(value, bool):
        low, high = _INTS[kind]
        if not low <= value <= high:
            raise GatewayError(400, f"{where} is out of range [{low}, {high}]")
        return value
    if kind in _FLOATS and isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if kind == FD.TYPE_STRING and isinstance(value, str):
        return value
    if kind == FD.TYPE_BYTES:
        return _base64(value, where)
    if kind == FD.TYPE_ENUM and isinstance(value, str):
        enum_value = fd.enum_type.values_by_name.get(value)
        if enum_value is None:
            raise GatewayError(400, f"{where}: unknown value {value!r}")
        return enum_value.number
    raise GatewayError(400, f"{where} has the wrong type ({_kind(value)})")


def _base64(value: Any, where: str) -> bytes:
    """Bytes travel as base64: a string, or {"b64": string} (Triton's raw_handle)."""
    if isinstance(value, dict) and set(value) == {"b64"}:
        value = value["b64"]
    if not isinstance(value, str):
        raise GatewayError(400, f"{where} must be a base64 string, got {_kind(value)}")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise GatewayError(400, f"{where} is not valid base64") from None


def _set_parameter(message: Message, value: Any, where: str, key: str) -> None:
    """A JSON scalar into the oneof member of its type (Triton's parameter maps).

    Repository-load keys ``file:<version>/<name>`` carry base64 file contents (bytes).
    """
    fields = message.DESCRIPTOR.oneofs_by_name[PARAMETER_ONEOF].fields
    by_type: dict[int, FieldT] = {}
    for fd in fields:
        by_type.setdefault(fd.type, fd)
    if isinstance(value, str) and key.startswith("file:") and FD.TYPE_BYTES in by_type:
        setattr(message, by_type[FD.TYPE_BYTES].name, _base64(value, where))
        return
    if isinstance(value, bool):
        candidates = [FD.TYPE_BOOL]
    elif isinstance(value, int):
        candidates = [t for t in (FD.TYPE_INT64, FD.TYPE_UINT64, FD.TYPE_UINT32) if t in by_type]
        candidates = [t for t in candidates if _INTS[t][0] <= value <= _INTS[t][1]]
    elif isinstance(value, float):
        candidates = [FD.TYPE_DOUBLE]
    elif isinstance(value, str):
        candidates = [FD.TYPE_STRING]
    else:
        candidates = []
    for kind in candidates:
        if kind in by_type:
            setattr(message, by_type[kind].name, value)
            return
    allowed = sorted({_TYPE_WORDS.get(fd.type, "value") for fd in fields})
    raise GatewayError(400, f"{where} must be one of {allowed}, got {_kind(value)}")


_TYPE_WORDS = {
    FD.TYPE_BOOL: "bool",
    FD.TYPE_INT64: "int",
    FD.TYPE_UINT64: "int",
    FD.TYPE_UINT32: "int",
    FD.TYPE_STRING: "string",
    FD.TYPE_DOUBLE: "number",
    FD.TYPE_BYTES: "base64 string",
}


# --------------------------------------------------------------------------- responses


def render_response(route: Route, response: Message) -> Any:
    """The JSON value for an RPC response, shaped by the route's options."""
    omit = route.omit_defaults
    if not route.response_body:
        return _render_message(response, omit)
    fd = route.output_type.fields_by_name[route.response_body]
    if is_map(fd) and route.map_values:
        target = getattr(response, fd.name)
        return [
            _render_value(fd.message_type.fields_by_name["value"], target[k], omit)
            for k in sorted(target)
        ]
    return _render_field(response, fd, omit)


def _render_message(message: Message, omit: bool) -> Any:
    desc = message.DESCRIPTOR
    if is_parameter(desc):
        which = message.WhichOneof(PARAMETER_ONEOF)
        return (
            None
            if which is None
            else _render_scalar(desc.fields_by_name[which], getattr(message, which))
        )
    out: dict[str, Any] = {}
    for fd in desc.fields:
        if _skip(message, fd, omit):
            continue
        out[fd.name] = _render_field(message, fd, omit)
    return out


def _skip(message: Message, fd: FieldT, omit: bool) -> bool:
    if fd.has_presence:
        return not message.HasField(fd.name)
    if omit:
        value = getattr(message, fd.name)
        return not value if is_repeated(fd) else value == fd.default_value
    return False


def _render_field(message: Message, fd: FieldT, omit: bool) -> Any:
    value = getattr(message, fd.name)
    if is_map(fd):
        value_fd = fd.message_type.fields_by_name["value"]
        listed = value_fd.message_type is not None and value_list_field(value_fd.message_type)
        out = {}
        for key in value:
            rendered = _render_value(value_fd, value[key], omit)
            if listed and len(rendered) == 1 and key not in _LIST_SETTINGS:
                rendered = rendered[0]
            out[str(key)] = rendered
        return out
    if is_repeated(fd):
        return [_render_value(fd, item, omit) for item in value]
    return _render_value(fd, value, omit)


def _render_value(fd: FieldT, value: Any, omit: bool) -> Any:
    if fd.message_type is None:
        return _render_scalar(fd, value)
    listed = value_list_field(fd.message_type)
    if listed is not None:
        return list(getattr(value, listed.name))
    return _render_message(value, omit)


def _render_scalar(fd: FieldT, value: Any) -> Any:
    if fd.type == FD.TYPE_BYTES:
        return base64.b64encode(value).decode("ascii")
    if fd.type == FD.TYPE_ENUM:
        named = fd.enum_type.values_by_number.get(value)
        return named.name if named is not None else value
    return value
