"""Per-model settings of the python backend, from the config's ``parameters``.

All are optional string parameters, e.g. ``parameters { key: "execute_timeout_secs"
value { string_value: "30" } }``:

* ``execute_timeout_secs`` (default 300; 0 disables): an ``execute`` still running after
  this long is treated as hung: the worker is killed, the requests of that execution (and
  any decoupled request the worker still owed) fail with an error naming the model, and
  the worker is restarted.
* ``initialize_timeout_secs`` (default 600; 0 disables): start-up, ``auto_complete_config``
  and ``initialize`` together; past it the load (or restart) fails.
* ``finalize_timeout_secs`` (default 30): how long ``close`` waits for ``finalize`` before
  killing the worker.
* ``inline_tensor_limit_bytes`` (default 65536): tensors up to this size travel inside the
  control message; larger ones through shared memory.
* ``shared_memory_pool_bytes`` (default 256 MiB): reusable shared memory per direction and
  instance; beyond it a message gets a one-shot region.
* ``FORCE_CPU_ONLY_INPUT_TENSORS`` (Triton's, ``yes`` or ``no``; default ``yes``): with
  ``no`` Triton may hand a model inputs that are in GPU memory. This server's inputs
  always arrive in host memory (from the network, or from a host-side composing model), so
  both values give CPU tensors (``is_cpu()``); the value is checked as Triton checks it.
"""

from __future__ import annotations

from dataclasses import dataclass

from inference import model_config_pb2 as mc

from ..builtin.common import parameter
from .protocol import DEFAULT_INLINE_LIMIT
from .shm import DEFAULT_POOL_BYTES

__all__ = ["RESTART_BACKOFF", "Settings"]


def _seconds(text: str) -> float | None:
    """A timeout in seconds; 0 or less: none."""
    value = float(text)
    return value if value > 0 else None


DEFAULT_EXECUTE_TIMEOUT: float | None = 300.0
DEFAULT_INITIALIZE_TIMEOUT: float | None = 600.0
RESTART_BACKOFF = 5.0  # seconds between attempts once a restart failed
DEFAULT_FINALIZE_TIMEOUT = 30.0


@dataclass(frozen=True)
class Settings:
    execute_timeout: float | None = DEFAULT_EXECUTE_TIMEOUT  # None: wait for ever
    initialize_timeout: float | None = DEFAULT_INITIALIZE_TIMEOUT
    finalize_timeout: float = DEFAULT_FINALIZE_TIMEOUT
    inline_limit: int = DEFAULT_INLINE_LIMIT
    pool_bytes: int = DEFAULT_POOL_BYTES
    force_cpu_only_inputs: bool = True

    @classmethod
    def from_config(cls, config: mc.ModelConfig) -> Settings:
        return cls(
            execute_timeout=parameter(
                config, "execute_timeout_secs", _seconds, DEFAULT_EXECUTE_TIMEOUT
            ),
            initialize_timeout=parameter(
                config, "initialize_timeout_secs", _seconds, DEFAULT_INITIALIZE_TIMEOUT
            ),
            finalize_timeout=parameter(
                config, "finalize_timeout_secs", float, DEFAULT_FINALIZE_TIMEOUT
            ),
            inline_limit=parameter(config, "inline_tensor_limit_bytes", int, DEFAULT_INLINE_LIMIT),
            pool_bytes=parameter(config, "shared_memory_pool_bytes", int, DEFAULT_POOL_BYTES),
            force_cpu_only_inputs=_force_cpu_only(config),
        )


def _force_cpu_only(config: mc.ModelConfig) -> bool:
    key = "FORCE_CPU_ONLY_INPUT_TENSORS"
    if key not in config.parameters:
        return True
    value = config.parameters[key].string_value
    if value not in ("yes", "no"):
        raise ValueError(f"Incorrect value for FORCE_CPU_ONLY_INPUT_TENSORS: {value}'")
    return value == "yes"
