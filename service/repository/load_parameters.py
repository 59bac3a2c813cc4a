"""A load request's parameters, whoever sends them: ``config`` (a JSON ModelConfig that
overrides the repository's) and ``file:<version>/<name>`` contents.

The gRPC servicer (``grpc_frontend/codec.py``) reads them out of its message, a Python
model's ``pb_utils.load_model`` (``backends/python/model_control.py``) gets them as plain
values; both turn them into what ``ModelManager.load`` takes here, with the same texts,
so that no backend needs a transport's codec.
"""

from __future__ import annotations

from collections.abc import Mapping

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
        raise InvalidArgument(
            f"failed to load '{model}': parameter 'config' is not a valid ModelConfig: {exc}"
        ) from None
    return override


def file_contents(parameters: Mapping[str, bytes]) -> dict[str, bytes]:
    """The ``file:`` parameters by their ``<version>/<name>``; other keys are not files."""
    return {
        key.removeprefix(FILE_PREFIX): data
        for key, data in parameters.items()
        if key.startswith(FILE_PREFIX)
    }
