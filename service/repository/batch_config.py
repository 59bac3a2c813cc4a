"""``batch_input`` / ``batch_output`` as Triton's core checks them when a model loads.

``ValidateBatchIO`` of core r24.10 (``model_config_utils.cc``), with its texts and, as
``ValidateModelIOConfig`` adds, `` for <model>`` at the end. What the batches then get is
``scheduling/batch_io.py``'s.
"""

from __future__ import annotations

from inference import model_config_pb2 as mc

from .config_file import ConfigError

__all__ = ["check_batch_io"]


def _kind_name(enum: type[mc.BatchInput.Kind] | type[mc.BatchOutput.Kind], kind: int) -> str:
    """protobuf's ``Kind_Name``: empty for a value the enum does not have."""
    try:
        return enum.Name(kind)
    except ValueError:
        return ""


def _kind_and_source(
    what: str,
    enum: type[mc.BatchInput.Kind] | type[mc.BatchOutput.Kind],
    entry: mc.BatchInput | mc.BatchOutput,
) -> str | None:
    """What batch inputs and outputs share: a known kind and one source input."""
    kind = _kind_name(enum, entry.kind)
    if entry.kind not in enum.values():
        return f"unknown {what} kind '{kind}'"
    if len(entry.source_input) != 1:
        return f"{what} kind '{kind}' expects 1 source input, got {len(entry.source_input)}"
    return None


def _unknown_source(entry: mc.BatchInput | mc.BatchOutput, inputs: set[str]) -> str | None:
    """Triton checks the source names after the kind (and a batch input's data type)."""
    for source in entry.source_input:
        if source not in inputs:
            return f"unknown source input name '{source}'"
    return None


def _why(config: mc.ModelConfig) -> str | None:
    inputs = {io.name for io in config.input}
    outputs = {io.name for io in config.output}
    for batch_input in config.batch_input:
        why = _kind_and_source("batch input", mc.BatchInput.Kind, batch_input)
        if why is None and batch_input.data_type not in (mc.TYPE_INT32, mc.TYPE_FP32):
            why = "batch input data type must be TYPE_INT32 or TYPE_FP32"
        why = why or _unknown_source(batch_input, inputs)
        if why is not None:
            return why
    for batch_output in config.batch_output:
        why = _kind_and_source("batch output", mc.BatchOutput.Kind, batch_output)
        why = why or _unknown_source(batch_output, inputs)
        if why is not None:
            return why
        targets: set[str] = set()
        for target in batch_output.target_name:
            if target not in outputs:
                return f"unknown target output name '{target}'"
            if target in targets:
                return f"target output name '{target}' can only be specified once"
            targets.add(target)
    return None


def check_batch_io(config: mc.ModelConfig) -> None:
    """Raise ConfigError with Triton's text for a batch input or output it refuses."""
    why = _why(config)
    if why is not None:
        raise ConfigError(f"{why} for {config.name}")
