"""``--http-header-forward-pattern``: HTTP headers whose name matches become string
parameters of the inference request, as Triton's HTTP frontend does.

The pattern's grammar is shared with the service (``wire.header_forward``); the gateway adds
the matches to the ModelInferRequest before the RPC, so the service hands them to the model
like any parameter.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from inference import grpc_service_pb2 as pb
from wire.header_forward import compile_forward_pattern, forwardable

__all__ = ["compile_forward_pattern", "forward_headers"]


def forward_headers(
    pattern: re.Pattern[str], headers: Mapping[str, str], request: pb.ModelInferRequest
) -> None:
    """Set each matching header as a string parameter of ``request``; it wins over an
    explicit parameter of the same name (in Triton it comes later, and the later one is
    what a model reads). Header values arrive as latin-1 text; UTF-8 is restored."""
    for name, value in headers.items():
        if pattern.search(name) is None or not forwardable(name):
            continue
        raw = value.encode("latin-1")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            text = value
        request.parameters[name].string_param = text
