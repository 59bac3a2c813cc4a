"""Triton's restricted HTTP APIs (``--http-restricted-api``) and the metadata forwarded
with every RPC (W3C trace context, restricted-protocol keys).

The check is decided per route once, at start: an unrestricted route pays one dict
lookup. Values are compared with ``hmac.compare_digest`` and never logged.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from wire.api_groups import GROUP_METHODS, Restriction

from .errors import GatewayError

__all__ = ["GROUP_METHODS", "GRPC_KEY_PREFIX", "TRACE_HEADERS", "Access"]

#: The service reads a restricted protocol's key from this metadata prefix + key.
GRPC_KEY_PREFIX = "triton-grpc-protocol-"

#: W3C trace context headers, forwarded to the service as gRPC metadata.
TRACE_HEADERS = ("traceparent", "tracestate")


@dataclass(frozen=True, slots=True)
class _Rule:
    header: str
    expected: bytes = field(repr=False)
    message: str


class Access:
    """The per-RPC restriction table, and the metadata to forward for a request."""

    def __init__(self, rules: Iterable[Restriction]) -> None:
        self._by_rpc: dict[str, list[_Rule]] = {}
        self._keys: list[str] = []
        for rule in rules:
            message = f"This API is restricted, expecting header '{rule.key}'"
            checked = _Rule(rule.key, rule.value.encode("utf-8"), message)
            self._keys.append(rule.key)
            for group in rule.groups:
                for rpc in GROUP_METHODS[group]:
                    guards = self._by_rpc.setdefault(rpc, [])
                    if checked not in guards:
                        guards.append(checked)

    def restricted(self, rpc: str) -> bool:
        return rpc in self._by_rpc

    def check(self, rpc: str, headers: Mapping[str, str]) -> None:
        """Raise 403 unless the request carries the key of every group that restricts its
        route (one group, except for v1 Status)."""
        rules = self._by_rpc.get(rpc)
        if rules is None:
            return
        for rule in rules:
            got = headers.get(rule.header)
            # latin-1: how the ASGI header bytes were decoded (app.py), so bytes round-trip.
            if got is None or not hmac.compare_digest(got.encode("latin-1"), rule.expected):
                raise GatewayError(403, rule.message)

    def metadata(self, headers: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
        """gRPC metadata for the calls a request makes: its W3C trace context, and the
        restricted-API keys it presented, as the service's restricted-protocol keys."""
        out: list[tuple[str, str]] = []
        for name in TRACE_HEADERS:
            value = headers.get(name)
            if value is not None and _metadata_safe(value):
                out.append((name, value))
        for key in self._keys:
            value = headers.get(key)
            if value is not None and _metadata_safe(value):
                out.append((GRPC_KEY_PREFIX + key, value))
        return tuple(out)


def _metadata_safe(value: str) -> bool:
    """gRPC refuses metadata values outside printable ASCII; such a header is dropped."""
    return value.isascii() and value.isprintable()
