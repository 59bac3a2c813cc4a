"""A Python model's custom-metrics calls on the server's side (``pb_metrics.py`` in the
worker): run on the worker's reader thread against the server's registry
(``telemetry/custom_metrics.py``), which takes its own lock, and answered at once with a
``control_reply``; a reference given back (call id 0) is not answered."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from ...telemetry.custom_metrics import CUSTOM_METRICS, MetricError
from .bls import Reply

__all__ = ["serve_metric"]


def serve_metric(owner: Hashable, reply: Reply, message: tuple[Any, ...]) -> None:
    _, call_id, operation, args = message
    result: Any = None
    error: str | None = None
    try:
        if operation == "family":
            CUSTOM_METRICS.family(owner, *args)
        elif operation == "metric":
            CUSTOM_METRICS.metric(owner, *args)
        elif operation == "update":
            result = CUSTOM_METRICS.update(*args)
        elif operation == "release":
            CUSTOM_METRICS.release(owner, *args)
        elif operation == "barrier":  # answered after every release sent before it
            pass
        else:
            error = "Unknown metric operation"
    except MetricError as exc:
        error = str(exc)
    except (TypeError, ValueError) as exc:  # malformed arguments from the model's side
        error = f"invalid custom metric call '{operation}': {exc}"
    if call_id:
        reply(("control_reply", call_id, result, error), None)
