"""Shared-memory test support for both client protocols: Triton's example models as ONNX
stand-ins, and system regions made (and always destroyed) with tritonclient's own
``tritonclient.utils.shared_memory``, as a Triton user makes them.

Client environment only (tritonclient); the models are written with tests/models.py.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import tritonclient.utils.shared_memory as shm
from models import add_sub_model, identity_model, make_config, string_add_sub_model, write_model
from onnx import TensorProto

__all__ = ["region", "write_shm_models"]

SLOW_MS = 1500


def write_shm_models(repo: Path) -> Path:
    """``simple`` (INT32 add/sub, [16], batching 8) and ``simple_string`` (its BYTES form)
    as Triton's client examples expect them; ``identity_fp32`` (FP32 [-1], no batching) for
    large tensors; ``slow_identity`` (the identity backend, SLOW_MS per execution) to hold
    a region in use."""
    io = [("INPUT0", "INT32", [16]), ("INPUT1", "INT32", [16])]
    out = [("OUTPUT0", "INT32", [16]), ("OUTPUT1", "INT32", [16])]
    write_model(
        repo,
        "simple",
        add_sub_model(TensorProto.INT32, ("batch", 16)),
        make_config("simple", io, out, max_batch_size=8),
    )
    strings = [(name, "BYTES", dims) for name, _, dims in io]
    string_out = [(name, "BYTES", dims) for name, _, dims in out]
    write_model(
        repo,
        "simple_string",
        string_add_sub_model(),
        make_config("simple_string", strings, string_out, max_batch_size=8),
    )
    write_model(
        repo,
        "identity_fp32",
        identity_model(TensorProto.FLOAT, ["n"]),
        make_config("identity_fp32", [("INPUT0", "FP32", [-1])], [("OUTPUT0", "FP32", [-1])]),
    )
    slow = repo / "slow_identity"
    slow.joinpath("1").mkdir(parents=True, exist_ok=True)
    slow.joinpath("config.pbtxt").write_text(
        'name: "slow_identity"\nbackend: "identity"\nmax_batch_size: 0\n'
        'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]\n'
        'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]\n'
        "instance_group [ { count: 1 kind: KIND_CPU } ]\n"
        f'parameters [ {{ key: "execute_delay_ms" value {{ string_value: "{SLOW_MS}" }} }} ]\n',
        encoding="utf-8",
    )
    return repo


@contextlib.contextmanager
def region(name: str, byte_size: int, *values: np.ndarray[Any, Any]) -> Iterator[Any]:
    """A fresh POSIX region (unique key), filled with ``values`` back to back; destroyed
    (unlinked) when the block ends, whatever the server did with it."""
    key = f"/{name}_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    handle = shm.create_shared_memory_region(name, key, byte_size, create_only=True)
    try:
        offset = 0
        for value in values:
            shm.set_shared_memory_region(handle, [value], offset=offset)
            offset += value.nbytes if value.dtype != np.object_ else len(value.item())
        yield handle
    finally:
        shm.destroy_shared_memory_region(handle)


def key_of(handle: Any) -> str:
    """The shm key a tritonclient region handle was created with."""
    return str(handle._shm_key)
