"""Checking an ensemble's steps against the configs of the models they call.

Pure: the caller passes a lookup from (model name, version) to that model's completed
config. Every fault is a ConfigError naming the step's model and the tensor at fault, and
makes the ensemble UNAVAILABLE with that reason.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from inference import model_config_pb2 as mc
from wire import datatypes

from .config_file import ConfigError

__all__ = ["ConfigLookup", "TensorInfo", "composing_models", "validate_ensemble"]

ConfigLookup = Callable[[str, int], "mc.ModelConfig | None"]


@dataclass(frozen=True)
class TensorInfo:
    datatype: str
    dims: tuple[int, ...]
    where: str  # who declares it, for messages


def composing_models(config: mc.ModelConfig) -> list[str]:
    return list(dict.fromkeys(step.model_name for step in config.ensemble_scheduling.step))


def _datatype(tensor: mc.ModelInput | mc.ModelOutput) -> str:
    return datatypes.datatype_from_config(mc.DataType.Name(tensor.data_type))


def _compatible(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    return len(a) == len(b) and all(x == -1 or y == -1 or x == y for x, y in zip(a, b, strict=True))


def _check(name: str, have: TensorInfo, want: TensorInfo) -> None:
    if have.datatype != want.datatype:
        raise ConfigError(
            f"ensemble tensor '{name}' is {have.datatype} in {have.where} but "
            f"{want.datatype} in {want.where}"
        )
    if not _compatible(have.dims, want.dims):
        raise ConfigError(
            f"ensemble tensor '{name}' has dims {list(have.dims)} in {have.where} but "
            f"{list(want.dims)} in {want.where}"
        )


def validate_ensemble(config: mc.ModelConfig, lookup: ConfigLookup) -> dict[str, str]:
    """Raise ConfigError at the first fault; return every ensemble tensor's datatype."""
    steps = config.ensemble_scheduling.step
    if not steps:
        raise ConfigError("ensemble_scheduling must have at least one step")
    produced: dict[str, TensorInfo] = {
        t.name: TensorInfo(_datatype(t), tuple(t.dims), "the ensemble's inputs")
        for t in config.input
    }
    consumers: list[tuple[str, TensorInfo]] = []
    decoupled: set[int] = set()
    for index, step in enumerate(steps):
        label = f"step {index} ('{step.model_name}')"
        if step.model_name == config.name:
            raise ConfigError(f"{label}: an ensemble cannot call itself")
        composing = lookup(step.model_name, step.model_version)
        if composing is None:
            raise ConfigError(
                f"{label}: model '{step.model_name}' (version {step.model_version}) is not "
                "available"
            )
        if composing.model_transaction_policy.decoupled:
            decoupled.add(index)
        if config.max_batch_size > composing.max_batch_size:
            raise ConfigError(
                f"{label}: the ensemble's max_batch_size {config.max_batch_size} exceeds the "
                f"model's {composing.max_batch_size}"
            )
        inputs = {t.name: t for t in composing.input}
        for model_input, tensor in step.input_map.items():
            if model_input not in inputs:
                raise ConfigError(f"{label}: the model has no input '{model_input}'")
            spec = inputs[model_input]
            consumers.append((tensor, TensorInfo(_datatype(spec), tuple(spec.dims), label)))
        unmapped = [n for n, t in inputs.items() if n not in step.input_map and not t.optional]
        if unmapped:
            raise ConfigError(f"{label}: inputs not mapped: {', '.join(unmapped)}")
        outputs = {t.name: t for t in composing.output}
        for model_output, tensor in step.output_map.items():
            if model_output not in outputs:
                raise ConfigError(f"{label}: the model has no output '{model_output}'")
            if tensor in produced:
                raise ConfigError(
                    f"{label}: ensemble tensor '{tensor}' is already produced by "
                    f"{produced[tensor].where}"
                )
            out = outputs[model_output]
            produced[tensor] = TensorInfo(_datatype(out), tuple(out.dims), label)
    for tensor, want in consumers:
        if tensor not in produced:
            raise ConfigError(f"{want.where}: ensemble tensor '{tensor}' is never produced")
        _check(tensor, produced[tensor], want)
    for output in config.output:
        if output.name not in produced:
            raise ConfigError(f"ensemble output '{output.name}' is not produced by any step")
        declared = TensorInfo(_datatype(output), tuple(output.dims), "the ensemble's outputs")
        _check(output.name, produced[output.name], declared)
    order = _check_acyclic(config)
    if _decoupled_flow(config, order, decoupled):
        config.model_transaction_policy.decoupled = True
    return {name: info.datatype for name, info in produced.items()}


def _decoupled_flow(config: mc.ModelConfig, order: list[int], decoupled: set[int]) -> bool:
    """Whether any step is decoupled (then so is the ensemble, as Triton marks it: its
    requests may get 0..N responses); a step may not join the outputs of two different
    decoupled steps, whose response counts need not match."""
    steps = config.ensemble_scheduling.step
    label = {t.name: 0 for t in config.input}
    labels = 0
    for index in order:
        step = steps[index]
        sources = {label[t] for t in step.input_map.values()}
        if len(sources) > 1:
            raise ConfigError(
                f"in ensemble {config.name}, step of model '{step.model_name}' receives "
                "inputs originated from different decoupled models"
            )
        if index in decoupled:
            labels += 1
            own = labels
        else:
            own = sources.pop() if sources else 0
        for tensor in step.output_map.values():
            label[tensor] = own
    return labels != 0


def _check_acyclic(config: mc.ModelConfig) -> list[int]:
    """Steps must form a DAG over ensemble tensors (a step cannot wait on itself); returns
    the steps in an order that runs each after the steps it depends on."""
    steps = list(config.ensemble_scheduling.step)
    available = {t.name for t in config.input}
    remaining = list(range(len(steps)))
    order: list[int] = []
    while remaining:
        runnable = [i for i in remaining if set(steps[i].input_map.values()) <= available]
        if not runnable:
            names = ", ".join(f"'{steps[i].model_name}'" for i in remaining)
            raise ConfigError(f"ensemble steps form a cycle or wait forever: {names}")
        for i in runnable:
            available.update(steps[i].output_map.values())
            remaining.remove(i)
            order.append(i)
    return order
