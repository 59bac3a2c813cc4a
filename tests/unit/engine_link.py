"""An engine and one frontend's client in one test process, over the real channel.

``linked(core)`` serves ``core`` as the engine process does (``EngineServer``) on a fresh
abstract socket and connects an ``EngineClient`` to it; ``knows(client, request)`` waits
until the engine's model snapshot lets the client check ``request`` (it arrives as an
event after the connection).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
from collections.abc import AsyncIterator

from service.core.inference_server import InferenceServer
from service.engine.channel_server import EngineServer
from service.frontend.client import EngineClient
from service.telemetry.settings import TraceSettings
from service.telemetry.tracing import Tracing
from service.types import InferRequest


@contextlib.asynccontextmanager
async def linked(core: InferenceServer) -> AsyncIterator[EngineClient]:
    address = f"\0test-engine-link-{os.getpid()}-{secrets.token_hex(4)}"
    engine = EngineServer(address, core, Tracing(TraceSettings()), None, arena_bytes=1 << 20)
    await engine.start()
    client = EngineClient(address, 1, arena_bytes=1 << 20)
    await client.connect()
    try:
        yield client
    finally:
        client.close()
        await engine.close()


async def knows(client: EngineClient, request: InferRequest) -> bool:
    """Whether the client can check ``request`` within two seconds."""
    for _ in range(200):
        if client.models.check(request) is not None:
            return True
        await asyncio.sleep(0.01)
    return False
