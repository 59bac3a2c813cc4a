"""Request parameters: which ones the server consumes, and what reaches the backend.

As in Triton's frontends, ``sequence_id``, ``sequence_start``, ``sequence_end``,
``priority`` and ``timeout`` steer the request itself; keys starting with ``triton_`` are
reserved (only ``triton_enable_empty_final_response`` is allowed); every other parameter
is handed to the backend unchanged (a Python model reads them as JSON from
``request.parameters()``), and ensembles pass them on to every step.
"""

from __future__ import annotations

from collections.abc import Mapping

from wire.header_forward import CONSUMED

from ..errors import InvalidArgument
from ..types import ParameterValue

__all__ = ["CONSUMED", "RESERVED_ALLOWED", "backend_parameters"]

#: The ``triton_`` keys a request may set (Triton's TRITON_RESERVED_REQUEST_PARAMS).
RESERVED_ALLOWED = ("triton_enable_empty_final_response",)


def backend_parameters(parameters: Mapping[str, object]) -> dict[str, ParameterValue]:
    """The parameters a backend sees; raises InvalidArgument with Triton's texts for a
    reserved ``triton_`` key or a value type a backend cannot take (bytes)."""
    if not parameters:
        return {}
    out: dict[str, ParameterValue] = {}
    for key, value in parameters.items():
        if key in CONSUMED:
            continue
        if key.startswith("triton_"):
            if key not in RESERVED_ALLOWED:
                raise InvalidArgument(
                    "parameter keys starting with 'triton_' are reserved for Triton usage. "
                    "Only the following keys starting with 'triton_' are allowed: "
                    + " ".join(RESERVED_ALLOWED)
                )
            if not isinstance(value, bool):
                raise InvalidArgument(
                    f"invalid value type for '{key}' parameter, expected bool_param."
                )
            continue
        if not isinstance(value, bool | int | float | str):
            raise InvalidArgument(
                f"invalid value type for '{key}' parameter, expected int64_param, "
                "bool_param, or string_param."
            )
        out[key] = value
    return out
