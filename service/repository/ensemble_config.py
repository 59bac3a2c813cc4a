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

__all__ = [
    "ConfigLookup",
    "StepShapes",
    "TensorInfo",
    "composing_models",
    "step_shapes",
    "validate_ensemble",
]

ConfigLookup = Callable[[str, int], "mc.ModelConfig | None"]


@dataclass(frozen=True)
class TensorInfo:
    datatype: str
    dims: tuple[int, ...]
    where: str  # who declares it, for messages


@dataclass(frozen=True)
class StepShapes:
    """What a step's request is shaped by (Triton's ``EnsembleContext::InitStep``): whether
    its model batches (``max_batch_size > 0``) and the config dims of each of its inputs."""

    batching: bool
    inputs: dict[str, tuple[int, ...]]


def step_shapes(config: mc.ModelConfig, lookup: ConfigLookup) -> list[StepShapes]:
    """Per step, the composing model's batching and input dims (after a validated load)."""
    shapes = []
    for step in config.ensemble_scheduling.step:
        composing = lookup(step.model_name, step.model_version)
        assert composing is not None  # validate_ensemble checked it
        shapes.append(
            StepShapes(
                composing.max_batch_size > 0, {t.name: tuple(t.dims) for t in composing.input}
            )
        )
    return shapes


def _io_dims(tensor: mc.ModelInput | mc.ModelOutput) -> tuple[int, ...]:
    """The dims Triton's ensemble checks use: the reshape's shape when there is one."""
    return tuple(tensor.reshape.shape) if tensor.HasField("reshape") else tuple(tensor.dims)


@dataclass(frozen=True)
class _Node:
    """Triton's TensorNode: what one model says an ensemble tensor is."""

    model: str
    data_type: int
    dims: tuple[int, ...]
    batching: bool

    @property
    def full_dims(self) -> tuple[int, ...]:
        return ((-1,) if self.batching else ()) + self.dims


def _dims_text(dims: tuple[int, ...]) -> str:
    return "[" + ",".join(str(d) for d in dims) + "]"


def _consistent(ensemble: str, tensor: str, lhs: _Node, rhs: _Node) -> None:
    """Triton's ValidateTensorConsistency: same datatype; dims that agree (-1 matching
    anything), or full dims that agree (a non-batching model's [-1, d...] against a
    batching model's [d...])."""
    prefix = f"in ensemble {ensemble}, ensemble tensor {tensor}: "
    if lhs.data_type != rhs.data_type:
        raise ConfigError(
            f"{prefix}inconsistent data type: {mc.DataType.Name(lhs.data_type)} is inferred "
            f"from model {lhs.model} while {mc.DataType.Name(rhs.data_type)} is inferred "
            f"from model {rhs.model}"
        )
    if not _compatible(lhs.dims, rhs.dims) and not _compatible(lhs.full_dims, rhs.full_dims):
        raise ConfigError(
            f"{prefix}inconsistent shape: {_dims_text(lhs.full_dims)} is inferred from model "
            f"{lhs.model} while {_dims_text(rhs.full_dims)} is inferred from model {rhs.model}"
        )


def composing_models(config: mc.ModelConfig) -> list[str]:
    return list(dict.fromkeys(step.model_name for step in config.ensemble_scheduling.step))


def _datatype(tensor: mc.ModelInput | mc.ModelOutput) -> str:
    return datatypes.datatype_from_config(mc.DataType.Name(tensor.data_type))


def _compatible(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    return len(a) == len(b) and all(x == -1 or y == -1 or x == y for x, y in zip(a, b, strict=True))


def validate_ensemble(config: mc.ModelConfig, lookup: ConfigLookup) -> dict[str, str]:
    """Raise ConfigError at the first fault; return every ensemble tensor's datatype.

    Datatypes and shapes are checked as Triton's ValidateEnsembleConfig checks them, in its
    order and with its texts: the ensemble's inputs, then its outputs, then each step's
    inputs and outputs, each compared with the first model that named the tensor."""
    steps = config.ensemble_scheduling.step
    if not steps:
        raise ConfigError("ensemble_scheduling must have at least one step")
    ensemble_batching = config.max_batch_size > 0
    nodes: dict[str, _Node] = {}
    ios: list[mc.ModelInput | mc.ModelOutput] = [*config.input, *config.output]
    for io in ios:
        nodes.setdefault(io.name, _Node(config.name, io.data_type, _io_dims(io), ensemble_batching))

    def meet(tensor: str, node: _Node) -> None:
        known = nodes.setdefault(tensor, node)
        if known is not node:
            _consistent(config.name, tensor, known, node)

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
        # A batching ensemble may hold models that do not batch (their shapes are
        # expanded); a batching model must take the ensemble's whole batch.
        if 0 < composing.max_batch_size < config.max_batch_size:
            raise ConfigError(
                f"ensemble {config.name} allows maximum batch size {config.max_batch_size}, "
                f"but it contains model {step.model_name} which only allows maximum batch "
                f"size to be {composing.max_batch_size}"
            )
        batching = composing.max_batch_size > 0
        inputs = {t.name: t for t in composing.input}
        for model_input in step.input_map:
            if model_input not in inputs:
                raise ConfigError(f"{label}: the model has no input '{model_input}'")
        for spec in composing.input:
            if spec.name in step.input_map:
                tensor = step.input_map[spec.name]
                meet(tensor, _Node(step.model_name, spec.data_type, tuple(spec.dims), batching))
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
            meet(tensor, _Node(step.model_name, out.data_type, tuple(out.dims), batching))
            produced[tensor] = TensorInfo(_datatype(out), tuple(out.dims), label)
    for tensor, want in consumers:
        if tensor not in produced:
            raise ConfigError(f"{want.where}: ensemble tensor '{tensor}' is never produced")
    for output in config.output:
        if output.name not in produced:
            raise ConfigError(f"ensemble output '{output.name}' is not produced by any step")
    order = _check_acyclic(config)
    # Set either way, as Triton's ValidateEnsembleConfig does: clients see it present.
    config.model_transaction_policy.SetInParent()
    config.model_transaction_policy.decoupled = _decoupled_flow(config, order, decoupled)
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
