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

from ..config import PROTOCOL_GROUPS, RestrictedProtocol

__all__ = ["GROUP_METHODS", "HEADER_PREFIX", "restrict"]

log = logging.getLogger(__name__)

HEADER_PREFIX = "triton-grpc-protocol-"

#: Which RPCs each group covers (Triton's grouping). "health" also covers the standard
#: grpc.health.v1 service, as in Triton (see restrict()).
GROUP_METHODS: dict[str, tuple[str, ...]] = {
    "health": ("ServerLive", "ServerReady", "ModelReady"),
    "metadata": ("ServerMetadata", "ModelMetadata"),
    "inference": ("ModelInfer", "ModelStreamInfer"),
    "shared-memory": (
        "SystemSharedMemoryStatus",
        "SystemSharedMemoryRegister",
        "SystemSharedMemoryUnregister",
        "CudaSharedMemoryStatus",
        "CudaSharedMemoryRegister",
        "CudaSharedMemoryUnregister",
    ),
    "model-config": ("ModelConfig",),
    "model-repository": ("RepositoryIndex", "RepositoryModelLoad", "RepositoryModelUnload"),
    "statistics": ("ModelStatistics",),
    "trace": ("TraceSetting",),
    "logging": ("LogSettings",),
}
assert set(GROUP_METHODS) == set(PROTOCOL_GROUPS)

Method = Callable[[Any, grpc.aio.ServicerContext[Any, Any]], Any]


def _has_key(context: grpc.aio.ServicerContext[Any, Any], header: str, expected: bytes) -> bool:
    for key, value in context.invocation_metadata() or ():
        if key == header:
            got = value if isinstance(value, bytes) else value.encode()
            return hmac.compare_digest(got, expected)
    return False


def _guard(rpc: str, method: Method, header: str, expected: bytes) -> Method:
    """Same calling style as ``method``: an async generator stays one (response streams
    written by ``yield``); a coroutine stays one (unary, or streams written by
    ``context.write`` such as the health service's Watch)."""
    message = f"This protocol is restricted, expecting header '{header}'"

    def refuse(context: grpc.aio.ServicerContext[Any, Any]) -> None:
        """The status without ``context.abort``, whose exception would keep the request
        alive in a reference cycle (see status.py)."""
        log.warning("%s refused: restricted protocol, header '%s' missing or wrong", rpc, header)
        context.set_code(grpc.StatusCode.UNAVAILABLE)
        context.set_details(message)

    if inspect.isasyncgenfunction(method):

        @functools.wraps(method)
        async def guarded_stream(
            request: Any, context: grpc.aio.ServicerContext[Any, Any]
        ) -> AsyncIterator[Any]:
            if not _has_key(context, header, expected):
                refuse(context)
                return
            async for item in method(request, context):
                yield item

        return guarded_stream

    @functools.wraps(method)
    async def guarded(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        if not _has_key(context, header, expected):
            refuse(context)
            return None
        return await method(request, context)

    return guarded


def restrict(inference: object, health: object, rules: Iterable[RestrictedProtocol]) -> list[str]:
    """Guard the restricted methods of both servicers in place; returns the guarded names."""
    guarded: list[str] = []
    for rule in rules:
        header = HEADER_PREFIX + rule.key
        expected = rule.value.encode()
        for group in sorted(rule.groups):
            targets = [(inference, rpc) for rpc in GROUP_METHODS[group]]
            if group == "health":
                targets += [(health, rpc) for rpc in ("Check", "Watch")]
            for servicer, rpc in targets:
                setattr(servicer, rpc, _guard(rpc, getattr(servicer, rpc), header, expected))
                guarded.append(rpc)
    return guarded
