"""The private call a REST gateway holds open on the service to follow its stop: its
name and its two messages, written once for both sides (``gateway/service_link.py``,
``service/grpc_frontend/gateway_link.py``; decision 033).

Raw bytes, one JSON object per message: service to gateway ``{"stop": seconds}`` (the
exit timeout the gateway's HTTP stop gets); gateway to service ``{"busy": 0 or 1}``
(whether it holds HTTP connections: first as the call starts, then at each change; a stop
signalled while no gateway holds any refuses new requests at once, ``service/admission.py``)
and ``{"left": seconds, "cut": n}`` (what its HTTP stop left of the exit timeout, and how
many requests in flight it cut off when that was spent: work left at the exit timeout,
which ends the service with exit code 1, as Triton's core; an older gateway sends no
``cut``). No proto and no reflection entry: it is private to our two processes.
"""

from __future__ import annotations

import json

__all__ = [
    "BUSY",
    "CUT",
    "LEFT",
    "METHOD",
    "PATH",
    "SERVICE",
    "STOP",
    "encode",
    "flag",
    "report",
    "seconds",
]

SERVICE = "triton_gateway.GatewayLink"
METHOD = "Follow"
PATH = f"/{SERVICE}/{METHOD}"
STOP = "stop"  # service -> gateway: the exit timeout
LEFT = "left"  # gateway -> service: the seconds of it left
BUSY = "busy"  # gateway -> service: 1 while it holds HTTP connections, else 0
CUT = "cut"  # gateway -> service, beside LEFT: requests cut off by the exit timeout


def encode(key: str, value: float) -> bytes:
    """One message: ``{key: value}``."""
    return json.dumps({key: value}).encode()


def report(left: float, cut: int) -> bytes:
    """The gateway's last message: ``{"left": left, "cut": cut}``."""
    return json.dumps({LEFT: left, CUT: cut}).encode()


def seconds(frame: bytes, key: str) -> float | None:
    """The non-negative seconds under ``key`` in ``frame``; None for anything else."""
    try:
        value = json.loads(frame).get(key)
    except (ValueError, AttributeError):
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return max(0.0, float(value))


def flag(frame: bytes, key: str) -> bool | None:
    """Whether the number under ``key`` in ``frame`` is not 0; None for anything else."""
    value = seconds(frame, key)
    return None if value is None else value > 0
