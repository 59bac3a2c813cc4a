"""Triton's HTTP checks of the shared-memory register bodies, before the generic mapping.

Triton's HTTP frontend reads these bodies itself and answers a missing field with its own
texts (400); the generic JSON mapping would instead send the RPC with the field's
default and report what the service then says. Everything else about these routes is
generic (``protojson.py``).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable
from typing import Any

from .errors import GatewayError

__all__ = ["BODY_CHECKS"]

_IPC_HANDLE_SIZE = 64  # sizeof(cudaIpcMemHandle_t)


def _require(body: Any, key: str) -> None:
    if not isinstance(body, dict) or key not in body:
        raise GatewayError(400, f"Shared memory register request has no '{key}' field")


def _system_register(body: Any) -> None:
    _require(body, "key")
    _require(body, "byte_size")


def _cuda_register(body: Any) -> None:
    _require(body, "raw_handle")
    handle = body["raw_handle"]
    encoded = handle.get("b64") if isinstance(handle, dict) else None
    try:
        raw = base64.b64decode(encoded, validate=True) if isinstance(encoded, str) else b""
    except (binascii.Error, ValueError):
        raw = b""
    if len(raw) != _IPC_HANDLE_SIZE:
        raise GatewayError(400, "'raw_handle' must be a valid base64 encoded cudaIpcMemHandle_t")


#: RPC name -> check of its parsed JSON body (None when the request had no body).
BODY_CHECKS: dict[str, Callable[[Any], None]] = {
    "SystemSharedMemoryRegister": _system_register,
    "CudaSharedMemoryRegister": _cuda_register,
}
