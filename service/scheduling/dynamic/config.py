"""The dynamic_batching block as Triton completes and checks it when a model loads.

Triton's ``NormalizeModelConfig`` fills ``preferred_batch_size`` with ``max_batch_size`` when
none is given (clients see it in the model config), and ``ValidateModelConfig`` refuses
the settings below with these texts (core r24.10, ``model_config_utils.cc``). Nothing here
allocates by value, so ``priority_levels: 18446744073709551615`` is just a number.
"""

from __future__ import annotations

from inference import model_config_pb2 as mc

from ...repository.normalize import fill_preferred_batch_size

__all__ = ["prepare_dynamic_batching"]


def prepare_dynamic_batching(config: mc.ModelConfig) -> None:
    """Complete ``config.dynamic_batching`` in place; ValueError names what is wrong."""
    batching = config.dynamic_batching
    fill_preferred_batch_size(batching.preferred_batch_size, config.max_batch_size)
    name = config.name
    for size in batching.preferred_batch_size:
        if size <= 0:
            raise ValueError(f"dynamic batching preferred size must be positive for {name}")
        if size > config.max_batch_size:
            raise ValueError(
                f"dynamic batching preferred size must be <= max batch size for {name}"
            )
    levels = batching.priority_levels
    if levels != 0:
        if not 1 <= batching.default_priority_level <= levels:
            raise ValueError(f"default priority level must be in range [1, {levels}] for {name}")
        for level in batching.priority_queue_policy:
            if not 1 <= level <= levels:
                raise ValueError(
                    "priority queue policy must have priority level in range "
                    f"[1, {levels}] for {name}"
                )
    if batching.preserve_ordering:
        if levels > 1:
            raise ValueError(
                f"Only one priority level is allowed when 'preserve_ordering' is true for {name}"
            )
        policies = [batching.default_queue_policy, *batching.priority_queue_policy.values()]
        for policy in policies:
            if policy.default_timeout_microseconds and policy.timeout_action == policy.DELAY:
                raise ValueError(
                    "Queue policy can not have DELAY as timeout action when "
                    f"'preserve_ordering' is true for {name}"
                )
