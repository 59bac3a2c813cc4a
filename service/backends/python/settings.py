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

Server-wide, ``--backend-config=python,<key>=<value>`` (Triton's python backend keys,
checked with its texts when a python model loads; a bad value fails the load):

* ``shm-default-byte-size`` (default 1 MiB, at least 1 MiB): the smallest shared-memory
  region of an instance's channel (Triton: the stub's initial pool).
* ``shm-growth-byte-size`` (> 0): larger regions are the smallest one plus whole steps of
  this (Triton: the pool's growth step); unset, they are powers of two.
* ``stub-timeout-seconds`` (> 0): how long the worker process may take to start and answer
  its first message (Triton parses it for its stub's start).
* ``shm_message_queue_size``, ``thread-pool-size``, ``shm-region-prefix-name``: checked as
  Triton checks them; no effect (one socket per worker, no named regions).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from inference import model_config_pb2 as mc

from ..backend_config import current
from ..builtin.common import parameter
from .protocol import DEFAULT_INLINE_LIMIT
from .shm import DEFAULT_POOL_BYTES, MIN_REGION

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
    smallest_region: int = MIN_REGION  # --backend-config python,shm-default-byte-size
    region_growth: int = 0  # python,shm-growth-byte-size; 0: powers of two
    start_timeout: float | None = None  # python,stub-timeout-seconds; None: initialize's

    @classmethod
    def from_config(cls, config: mc.ModelConfig) -> Settings:
        backend = backend_settings(current().for_backend("python"))
        return cls(
            **backend,
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


def _stol(text: str) -> int:
    """``std::stol`` as the python backend calls it: leading digits; else its error."""
    stripped = text.lstrip()
    digits = len(stripped) - len(stripped.lstrip("+-"))
    end = digits
    while end < len(stripped) and stripped[end].isdigit():
        end += 1
    if end == digits or digits > 1:
        raise ValueError("stol")  # std::invalid_argument's what(), Triton's whole message
    return int(stripped[:end])


def backend_settings(values: dict[str, str]) -> dict[str, Any]:
    """The python backend's ``--backend-config`` keys, checked as Triton's python backend
    checks them in ``TRITONBACKEND_Initialize`` (texts included)."""
    out: dict[str, Any] = {}
    if "shm-growth-byte-size" in values:
        growth = _stol(values["shm-growth-byte-size"])
        if growth <= 0:
            raise ValueError("shm-growth-byte-size can't be smaller than or equal to zero.")
        out["region_growth"] = growth
    if "shm-default-byte-size" in values:
        smallest = _stol(values["shm-default-byte-size"])
        if smallest < 1 << 20:
            raise ValueError("shm-default-byte-size can't be smaller than 4 MiBs")
        out["smallest_region"] = smallest
    if "thread-pool-size" in values and _stol(values["thread-pool-size"]) < 1:
        raise ValueError("thread-pool-size can't be less than 1.")
    if "shm-region-prefix-name" in values and not values["shm-region-prefix-name"]:
        raise ValueError("shm-region-prefix-name must at least contain one character.")
    if "shm_message_queue_size" in values:
        _stol(values["shm_message_queue_size"])
    if "stub-timeout-seconds" in values:
        seconds = _stol(values["stub-timeout-seconds"])
        if seconds <= 0:
            raise ValueError("stub-timeout-seconds can't be smaller than or equal to zero.")
        out["start_timeout"] = float(seconds)
    return out
