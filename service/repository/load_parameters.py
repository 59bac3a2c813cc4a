"""A load request's parameters, whoever sends them: ``config`` (a JSON ModelConfig that
overrides the repository's) and ``file:<version>/<name>`` contents.

The gRPC servicer (``grpc_frontend/codec.py``) reads them out of its message, a Python
model's ``pb_utils.load_model`` (``backends/python/model_control.py``) gets them as plain
values; both turn them into what ``ModelManager.load`` takes here, with the same texts,
so that no backend needs a transport's codec.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from google.protobuf import json_format

from inference import model_config_pb2 as mc

from ..errors import InvalidArgument

__all__ = ["FILE_PREFIX", "config_override", "file_contents"]

FILE_PREFIX = "file:"


def config_override(model: str, text: str) -> mc.ModelConfig:
    """The ``config`` parameter's ModelConfig; INVALID_ARGUMENT where it is not one."""
    override = mc.ModelConfig()
    try:
        json_format.Parse(text, override)
    except json_format.ParseError as exc:
        listed = _as_lists(text)
        if listed is None:
            raise InvalidArgument(
                f"failed to load '{model}': parameter 'config' is not a valid ModelConfig: {exc}"
            ) from None
        override = mc.ModelConfig()
        try:
            json_format.ParseDict(listed, override)
        except json_format.ParseError:
            raise InvalidArgument(
                f"failed to load '{model}': parameter 'config' is not a valid ModelConfig: {exc}"
            ) from None
    return override


def _as_lists(text: str) -> dict[str, Any] | None:
    """The JSON with every single value given for a repeated field made a one-element list,
    or None where nothing changes (or it is no JSON object).

    Triton parses the parameter with protobuf's C++ ``JsonStringToMessage``, which takes a
    lone value for a repeated field as a list of one (L0_lifecycle's
    test_concurrent_model_instance_load_sanity sends ``"instance_group": {...}``); Python's
    ``json_format`` refuses it.
    """
    try:
        value = json.loads(text)
    except ValueError:
        return None
    changed = [False]
    fixed = _listed(value, mc.ModelConfig.DESCRIPTOR, changed)
    return fixed if changed[0] and isinstance(fixed, dict) else None


def _listed(value: object, descriptor: Any, changed: list[bool]) -> object:
    """``value`` with the lone values of ``descriptor``'s repeated fields listed."""
    if not isinstance(value, dict):
        return value
    out: dict[str, object] = {}
    for key, item in value.items():
        field = descriptor.fields_by_camelcase_name.get(key) or descriptor.fields_by_name.get(key)
        if field is None:
            out[key] = item
            continue
        message = field.message_type
        is_map = message is not None and message.GetOptions().map_entry
        if field.is_repeated and not is_map:
            if not isinstance(item, list):
                item = [item]
                changed[0] = True
            if message is not None:
                item = [_listed(element, message, changed) for element in item]
        elif message is not None and not is_map:
            item = _listed(item, message, changed)
        out[key] = item
    return out


def file_contents(parameters: Mapping[str, bytes]) -> dict[str, bytes]:
    """The ``file:`` parameters by their ``<version>/<name>``; other keys are not files."""
    return {
        key.removeprefix(FILE_PREFIX): data
        for key, data in parameters.items()
        if key.startswith(FILE_PREFIX)
    }
