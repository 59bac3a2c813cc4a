"""Triton's test hook ``TRITONSERVER_SERVER_DELAY_GRPC_RESPONSE_SEC``: slow non-inference answers.

Triton (src/grpc/grpc_server.cc, v2.51) reads the variable once when its gRPC server is
built (``atoi``: leading digits, anything else 0) and hands it to the ``CommonHandler``,
the one thread and completion queue that serve every RPC except ModelInfer and
ModelStreamInfer (the health Check included). Each such call is executed, then its
response write sleeps the given number of seconds on that thread before ``Finish``; so
the calls also queue behind one another (a second call waits for the first one's
delay, then has its own). Load and unload run on a thread of their own and only their
write is delayed. qa/L0_client_timeout uses it to make every non-inference call of the
gRPC client time out ("Deadline Exceeded") with a short client timeout.

Here each frontend process (the one process with ``--frontends 0``) installs the delay
on its servicers at start when the variable is set: one lock per process stands for
Triton's one thread. The REST gateway's calls (on the local socket, or over gRPC with its
user agent) are not delayed: Triton's HTTP endpoint is not either.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import re
from collections.abc import Callable
from typing import Any

from inference import grpc_service_pb2 as pb

from .local_rpc import LocalContext

__all__ = ["DELAY_ENV", "delay_responses", "delay_seconds"]

log = logging.getLogger(__name__)

DELAY_ENV = "TRITONSERVER_SERVER_DELAY_GRPC_RESPONSE_SEC"

#: The inference RPCs, which Triton's infer handlers serve (never delayed by this hook).
INFERENCE_RPCS = frozenset({"ModelInfer", "ModelStreamInfer"})
#: Executed off the common thread in Triton (``async`` CommonCallData): only the write waits.
_OFF_THREAD = frozenset({"RepositoryModelLoad", "RepositoryModelUnload"})


def delay_seconds(environ: os._Environ[str] | dict[str, str] | None = None) -> int:
    """The hook's seconds as Triton's ``atoi`` reads them; 0 (off) when unset, not a number
    or not positive."""
    value = (os.environ if environ is None else environ).get(DELAY_ENV)
    if value is None:
        return 0
    match = re.match(r"\s*([+-]?\d+)", value)
    return max(0, int(match.group(1))) if match else 0


Method = Callable[[Any, Any], Any]


def _delayed(rpc: str, method: Method, seconds: int, lock: asyncio.Lock) -> Method:
    off_thread = rpc in _OFF_THREAD

    async def held(request: Any, context: Any) -> Any:
        if off_thread:
            answer = await method(request, context)
            async with lock:
                await _sleep(rpc, seconds)
            return answer
        async with lock:
            answer = await method(request, context)
            await _sleep(rpc, seconds)
        return answer

    @functools.wraps(method)
    async def delayed(request: Any, context: Any) -> Any:
        if _from_gateway(context):  # the REST gateway's call: HTTP is not delayed
            return await method(request, context)
        # Triton's thread sleeps whether or not the caller is still there: a call whose
        # deadline passed still holds the next ones back (shielded from its cancellation).
        task = asyncio.ensure_future(held(request, context))
        task.add_done_callback(_consume)
        return await asyncio.shield(task)

    return delayed


#: The user agent the REST gateway's channel announces (gateway/channel.py).
GATEWAY_AGENT = "triton-rest-gateway"


def _from_gateway(context: Any) -> bool:
    """A call of the REST gateway: on the local socket, or over gRPC with its agent."""
    if isinstance(context, LocalContext):
        return True
    for key, value in context.invocation_metadata() or ():
        if key == "user-agent":
            return str(value).startswith(GATEWAY_AGENT)
    return False


def _consume(task: asyncio.Task[Any]) -> None:
    if not task.cancelled():
        task.exception()  # retrieved: a call that was cancelled meanwhile logs nothing


async def _sleep(rpc: str, seconds: int) -> None:
    log.debug("Delaying the write of the response by %d seconds (%s)", seconds, rpc)
    await asyncio.sleep(seconds)


def delay_responses(servicer: object, health: object, seconds: int) -> list[str]:
    """Delay every unary non-inference RPC of ``servicer`` (the v2 inference service) and
    the health service's Check by ``seconds``, in place, before they are registered;
    returns the delayed names."""
    lock = asyncio.Lock()
    delayed: list[str] = []
    service = pb.DESCRIPTOR.services_by_name["GRPCInferenceService"]
    targets = [
        (servicer, method.name)
        for method in service.methods
        if method.name not in INFERENCE_RPCS
        and not (method.client_streaming or method.server_streaming)
    ]
    targets.append((health, "Check"))
    for target, rpc in targets:
        setattr(target, rpc, _delayed(rpc, getattr(target, rpc), seconds, lock))
        delayed.append(rpc)
    return delayed
