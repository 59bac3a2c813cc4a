"""``--grpc-header-forward-pattern``: gRPC metadata whose key matches becomes a request
parameter (a string), as Triton's gRPC frontend does. The pattern's grammar is shared with
the gateway (``wire.header_forward``); only the mapping from metadata to parameters lives
here, and the core treats the result as any parameter.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from wire.header_forward import compile_forward_pattern, forwardable

from ..types import InferRequest

__all__ = ["compile_forward_pattern", "forward_headers"]


def forward_headers(
    pattern: re.Pattern[str], metadata: Iterable[tuple[str, str | bytes]], request: InferRequest
) -> None:
    """Add each matching metadata entry to ``request.parameters`` as a string.

    A header wins over an explicit parameter of the same name (Triton appends it after
    the request's own, and the later one is what a model reads). Keys the server would
    interpret itself (``sequence_id``, ``priority``, ``triton_*``, ...) are left out:
    Triton passes them to the backend as plain strings, which one map cannot express."""
    for key, value in metadata:
        if pattern.search(key) is None or not forwardable(key):
            continue
        if isinstance(value, bytes):  # a "-bin" key
            value = value.decode("utf-8", "replace")
        request.parameters[key] = value
