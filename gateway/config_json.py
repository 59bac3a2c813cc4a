"""The REST model config (``/v2/models/<m>/config``) as Triton 2.51 writes it.

Triton's core (``ModelConfigToJson``, model_config_utils.cc) prints the config with
protobuf's JSON mapping, where 64-bit integers are strings, then turns a fixed list of
fields back into numbers (tensor dims, reshape shapes, queue delays, timeouts, priority
levels, the idle time, state dims, step versions, warmup dims). The 64-bit fields it
misses stay strings, and clients see them so: a sequence state's ``initial_state`` dims
(the core looks for ``initial_state`` beside ``state`` rather than in it), an instance
group's secondary device ids and the CUDA graph shapes. This renderer writes every
integer as a number, so those are turned into strings here.

``ensemble_scheduling.max_inflight_requests`` came after 2.51 (its model_config.proto has
no such field): it is left out while 0, the only value a 2.51 config can have.
"""

from __future__ import annotations

from typing import Any

__all__ = ["triton_config_json"]


def _strings(values: Any) -> list[str]:
    return [str(v) for v in values]


def _shapes_as_strings(shapes: Any) -> None:
    """``{name: {"dim": [...]}}`` (a CUDA graph spec's input shapes)."""
    for shape in (shapes or {}).values():
        shape["dim"] = _strings(shape.get("dim", ()))


def triton_config_json(config: Any) -> Any:
    """``config`` (the rendered ModelConfig) in Triton's REST form, changed in place."""
    if not isinstance(config, dict):
        return config
    ensemble = config.get("ensemble_scheduling")
    if isinstance(ensemble, dict) and ensemble.get("max_inflight_requests") == 0:
        del ensemble["max_inflight_requests"]
    for state in (config.get("sequence_batching") or {}).get("state", ()):
        for initial in state.get("initial_state", ()):
            initial["dims"] = _strings(initial.get("dims", ()))
    for group in config.get("instance_group", ()):
        for device in group.get("secondary_devices", ()):
            device["device_id"] = str(device.get("device_id", 0))
    cuda = (config.get("optimization") or {}).get("cuda") or {}
    for spec in cuda.get("graph_spec", ()):
        _shapes_as_strings(spec.get("input"))
        _shapes_as_strings((spec.get("graph_lower_bound") or {}).get("input"))
    return config
