"""Triton's restricted protocols: RPC groups that need a key in the caller's metadata.

The check is installed per method once, at start: a restricted method is replaced on the
servicer instance by a guarded one before it is registered with grpc, so unrestricted
RPCs run exactly as before, with no interceptor and no lookup per call. Values are
compared in constant time and never logged.
"""

from __future__ import annotations

import functools
import hmac
import inspect
import logging
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any

import grpc

from wire.api_groups import GROUP_METHODS, Restriction

__all__ = ["GROUP_METHODS", "HEADER_PREFIX", "restrict"]

log = logging.getLogger(__name__)

HEADER_PREFIX = "triton-grpc-protocol-"


Method = Callable[[Any, grpc.aio.ServicerContext[Any, Any]], Any]
#: Builds the in-band answer of a refused call: (rpc, message) -> response message.
Refusal = Callable[[str, str], Any]


def _has_key(context: grpc.aio.ServicerContext[Any, Any], header: str, expected: bytes) -> bool:
    for key, value in context.invocation_metadata() or ():
        if key == header:
            got = value if isinstance(value, bytes) else value.encode()
            return hmac.compare_digest(got, expected)
    return False


def _guard(
    rpc: str, method: Method, header: str, expected: bytes, answer: Refusal | None = None
) -> Method:
    """Same calling style as ``method``: an async generator stays one (response streams
    written by ``yield``); a coroutine stays one (unary, or streams written by
    ``context.write`` such as the health service's Watch).

    Without ``answer`` a refused call ends with gRPC UNAVAILABLE; with it (the v1 service,
    which reports every failure in-band) the call is answered with ``answer(rpc, text)``.
    """
    message = f"This protocol is restricted, expecting header '{header}'"

    def refuse(context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        """The v1 service's in-band answer, or the status set without ``context.abort``,
        whose exception would keep the request alive in a reference cycle (status.py)."""
        log.warning("%s refused: restricted protocol, header '%s' missing or wrong", rpc, header)
        if answer is not None:
            return answer(rpc, message)
        context.set_code(grpc.StatusCode.UNAVAILABLE)
        context.set_details(message)
        return None

    if inspect.isasyncgenfunction(method):

        @functools.wraps(method)
        async def guarded_stream(
            request: Any, context: grpc.aio.ServicerContext[Any, Any]
        ) -> AsyncIterator[Any]:
            if not _has_key(context, header, expected):
                reply = refuse(context)
                if reply is not None:
                    yield reply
                return
            async for item in method(request, context):
                yield item

        return guarded_stream

    @functools.wraps(method)
    async def guarded(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        if not _has_key(context, header, expected):
            return refuse(context)
        return await method(request, context)

    return guarded


def restrict(
    inference: object,
    health: object,
    rules: Iterable[Restriction],
    v1: object | None = None,
) -> list[str]:
    """Guard the restricted methods of the servicers in place; returns the guarded names.

    ``v1`` (the legacy GRPCService servicer) answers refusals in-band through its
    ``refusal(rpc, message)``; a method two restricted groups cover is guarded twice.
    """
    guarded: list[str] = []
    servicers = [inference, *([v1] if v1 is not None else [])]
    for rule in rules:
        header = HEADER_PREFIX + rule.key
        expected = rule.value.encode()
        for group in sorted(rule.groups):
            targets = [
                (s, rpc) for rpc in GROUP_METHODS[group] for s in servicers if hasattr(s, rpc)
            ]
            if group == "health":
                targets += [(health, rpc) for rpc in ("Check", "Watch")]
            for servicer, rpc in targets:
                answer = getattr(servicer, "refusal", None)
                method = _guard(rpc, getattr(servicer, rpc), header, expected, answer)
                setattr(servicer, rpc, method)
                guarded.append(rpc)
    return guarded
