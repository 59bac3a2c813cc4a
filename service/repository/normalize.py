"""The defaults Triton's core writes into every model config, so that clients read them back.

Triton's ``NormalizeModelConfig`` (core, model_config_utils.cc) runs when a config is read
and again after the backend's auto-complete; what it fills is part of the config that
``ModelConfig`` (gRPC) and ``/v2/models/<m>/config`` (REST) report, and what a Python
model's ``initialize`` gets:

- ``version_policy`` absent: ``latest { num_versions: 1 }``;
- ``dynamic_batching`` without ``preferred_batch_size``: ``[max_batch_size]`` when the
  model batches;
- ``sequence_batching``: ``max_sequence_idle_microseconds`` 0 becomes 1,000,000, and the
  Oldest strategy's ``preferred_batch_size`` is filled as dynamic batching's;
- every model but an ensemble: ``optimization.input_pinned_memory`` and
  ``output_pinned_memory`` absent become ``{ enable: true }``.

The schedulers read these fields with the same meaning whether filled or not (an empty
preferred list means "max_batch_size", an idle time of 0 means the default), so filling
them changes what clients see and nothing of how a model runs. Instance groups are
completed where they are expanded (``core.instance_groups``).
"""

from __future__ import annotations

from collections.abc import MutableSequence

from inference import model_config_pb2 as mc

__all__ = ["SEQUENCE_IDLE_DEFAULT_US", "fill_preferred_batch_size", "normalize_model_config"]

#: Triton's SEQUENCE_IDLE_DEFAULT_MICROSECONDS.
SEQUENCE_IDLE_DEFAULT_US = 1_000_000


def fill_preferred_batch_size(preferred: MutableSequence[int], max_batch_size: int) -> None:
    """A batcher without preferred sizes prefers ``max_batch_size`` (when the model
    batches at all), as Triton writes it into the config."""
    if not preferred and max_batch_size > 0:
        preferred.append(max_batch_size)


def normalize_model_config(config: mc.ModelConfig) -> None:
    """Fill Triton's ``NormalizeModelConfig`` defaults into ``config`` in place (idempotent)."""
    if not config.HasField("version_policy"):
        config.version_policy.latest.num_versions = 1
    if config.HasField("dynamic_batching"):
        fill_preferred_batch_size(
            config.dynamic_batching.preferred_batch_size, config.max_batch_size
        )
    if config.HasField("sequence_batching"):
        sequence = config.sequence_batching
        if sequence.max_sequence_idle_microseconds == 0:
            sequence.max_sequence_idle_microseconds = SEQUENCE_IDLE_DEFAULT_US
        if sequence.HasField("oldest"):
            fill_preferred_batch_size(sequence.oldest.preferred_batch_size, config.max_batch_size)
    if not config.HasField("ensemble_scheduling"):
        optimization = config.optimization
        if not optimization.HasField("input_pinned_memory"):
            optimization.input_pinned_memory.enable = True
        if not optimization.HasField("output_pinned_memory"):
            optimization.output_pinned_memory.enable = True
