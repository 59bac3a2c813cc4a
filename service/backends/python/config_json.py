"""The model config in the JSON form Triton gives Python models, and back.

Triton prints every scalar and repeated field (``max_batch_size: 0``, ``input: []``), keeps
proto field names, and writes 64-bit integers as numbers (``dims: [4]``, not ``["4"]``), so
``model_config["max_batch_size"] > 0`` and ``dims == [4]`` work in model code. Message
fields that were never set (``model_transaction_policy``, ``dynamic_batching``) are absent,
which is how ``auto_complete_config`` tells "unset" from "set to the default".
"""

from __future__ import annotations

import json
from typing import Any

from google.protobuf import json_format

from inference import model_config_pb2 as mc

__all__ = ["apply_completed", "config_to_json"]


def config_to_dict(config: mc.ModelConfig) -> dict[str, Any]:
    return json_format.MessageToDict(
        config,
        always_print_fields_with_no_presence=True,
        preserving_proto_field_name=True,
        unquote_int64_if_possible=True,
    )


def config_to_json(config: mc.ModelConfig) -> str:
    return json.dumps(config_to_dict(config))


def apply_completed(config: mc.ModelConfig, completed_json: str) -> None:
    """Replace ``config`` (in place) by what ``auto_complete_config`` returned."""
    completed = mc.ModelConfig()
    try:
        json_format.ParseDict(json.loads(completed_json), completed)
    except (json_format.ParseError, ValueError) as exc:
        raise ValueError(
            f"auto_complete_config of model '{config.name}' returned an invalid config: {exc}"
        ) from exc
    if completed.name != config.name:
        raise ValueError(
            f"auto_complete_config of model '{config.name}' renamed the model to '{completed.name}'"
        )
    config.CopyFrom(completed)
