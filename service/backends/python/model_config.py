"""``pb_utils.ModelConfig``: what a model's ``auto_complete_config`` receives and returns.

It wraps the model config in Triton's JSON form (the dict ``as_dict()`` returns) and
offers Triton's setters with Triton's rules: a setter may fill what the config left out
but never contradicts what it states (a ValueError naming the model fails the load).
Adding a tensor that is already present with the same properties is a no-op, so
completing an already completed config changes nothing.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["ModelConfig"]

_TENSOR_KEYS = {
    "input": ("name", "data_type", "dims", "optional"),
    "output": ("name", "data_type", "dims"),
}


class ModelConfig:
    def __init__(self, model_config: str | dict[str, Any]) -> None:
        config = json.loads(model_config) if isinstance(model_config, str) else model_config
        config.setdefault("name", "")
        config.setdefault("max_batch_size", 0)
        config.setdefault("input", [])
        config.setdefault("output", [])
        self._model_config: dict[str, Any] = config

    def as_dict(self) -> dict[str, Any]:
        return self._model_config

    @property
    def _name(self) -> str:
        return str(self._model_config["name"])

    def set_max_batch_size(self, max_batch_size: int) -> None:
        current = int(self._model_config["max_batch_size"])
        if current > max_batch_size:
            raise ValueError(
                f"configuration specified max_batch_size {current}, but in "
                f"auto-complete-config function for model '{self._name}' specified "
                f"max_batch_size {max_batch_size}"
            )
        self._model_config["max_batch_size"] = max_batch_size

    def set_dynamic_batching(self) -> None:
        for other in ("sequence_batching", "ensemble_scheduling"):
            if other in self._model_config:
                raise ValueError(
                    f"Configuration specified scheduling_choice as '{other}', but "
                    f"auto-complete-config function for model '{self._name}' tries to set "
                    "scheduling_choice as 'dynamic_batching'"
                )
        self._model_config.setdefault("dynamic_batching", {})

    def add_input(self, input: dict[str, Any]) -> None:
        self._add("input", input)

    def add_output(self, output: dict[str, Any]) -> None:
        self._add("output", output)

    def set_model_transaction_policy(self, transaction_policy_dict: dict[str, Any]) -> None:
        for key in transaction_policy_dict:
            if key != "decoupled":
                raise ValueError(
                    "model transaction property in auto-complete-config function for model "
                    f"'{self._name}' contains property other than 'decoupled'."
                )
        policy = self._model_config.setdefault("model_transaction_policy", {})
        if "decoupled" in transaction_policy_dict:
            wanted = bool(transaction_policy_dict["decoupled"])
            if "decoupled" in policy and bool(policy["decoupled"]) != wanted:
                raise ValueError(
                    "trying to change decoupled property in auto-complete-config for model "
                    f"'{self._name}', which is already set to '{policy['decoupled']}'."
                )
            policy["decoupled"] = wanted

    def _add(self, kind: str, tensor: dict[str, Any]) -> None:
        allowed = _TENSOR_KEYS[kind]
        name = tensor.get("name")
        extra = [key for key in tensor if key not in allowed]
        if extra:
            raise ValueError(
                f"{kind} '{name}' in auto-complete-config function for model '{self._name}' "
                f"contains property other than {', '.join(repr(k) for k in allowed)}."
            )
        if name is None:
            raise ValueError(
                f"{kind} in auto-complete-config function for model '{self._name}' is "
                "missing 'name' property."
            )
        for required in ("data_type", "dims"):
            if required not in tensor:
                raise ValueError(
                    f"{kind} '{name}' in auto-complete-config function for model "
                    f"'{self._name}' is missing '{required}' property."
                )
        dims = [int(d) for d in tensor["dims"]]
        for current in self._model_config[kind]:
            if current.get("name") != name:
                continue
            current_type = current.get("data_type", "TYPE_INVALID")
            if current_type != "TYPE_INVALID" and current_type != tensor["data_type"]:
                raise ValueError(
                    f"unable to load model '{self._name}', configuration expects datatype "
                    f"{current_type} for {kind} '{name}', model provides {tensor['data_type']}"
                )
            current_dims = [int(d) for d in current.get("dims", [])]
            if current_dims and current_dims != dims:
                raise ValueError(
                    f"model '{self._name}', tensor '{name}': the model expects dims {dims} "
                    f"but the model configuration specifies dims {current_dims}"
                )
            if (
                "optional" in current
                and "optional" in tensor
                and bool(current["optional"]) != bool(tensor["optional"])
            ):
                raise ValueError(
                    f"model '{self._name}', tensor '{name}': the model expects optional "
                    f"{tensor['optional']} but the model configuration specifies optional "
                    f"{current['optional']}"
                )
            current["data_type"] = tensor["data_type"]
            current["dims"] = dims
            if "optional" in tensor:
                current["optional"] = bool(tensor["optional"])
            return
        added = dict(tensor)
        added["dims"] = dims
        self._model_config[kind].append(added)
