"""A storm of expired and cancelled ModelInfer calls with normal ones among them.

Shared by ``tests/integration/test_cancel_storm_tables.py`` (client environment) and
``python -m loadtest cancel-storm`` (server environment): grpc only, the stub class and the
requests come from the caller, so each environment passes its own generated code.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import grpc

__all__ = ["storm_round"]


async def storm_round(
    url: str,
    stub_class: Callable[[grpc.aio.Channel], Any],
    requests: Sequence[Any],
    counts: Mapping[str, int],
    concurrency: int,
    rng: random.Random,
) -> Counter[str]:
    """``counts``: calls of each kind (``expired``: a 1 ms deadline; ``cancelled``: cancelled
    0-6 ms after being sent; ``normal``: no deadline); the outcomes, ``"<kind> <code>"``."""
    kinds = [kind for kind, count in counts.items() for _ in range(count)]
    rng.shuffle(kinds)
    outcomes: Counter[str] = Counter()
    limit = asyncio.Semaphore(concurrency)
    # Calls that share a connection with the cancels sometimes end CANCELLED (grpc's own
    # status, not the server's), so the normal ones have a connection of their own.
    own = [("grpc.use_local_subchannel_pool", 1)]
    async with (
        grpc.aio.insecure_channel(url) as storm_channel,
        grpc.aio.insecure_channel(url, options=own) as normal_channel,
    ):
        storm = stub_class(storm_channel)
        normal = stub_class(normal_channel)

        async def one(kind: str) -> None:
            request = rng.choice(requests)
            async with limit:
                try:
                    if kind == "expired":
                        await storm.ModelInfer(request, timeout=0.001)
                    elif kind == "cancelled":
                        call = storm.ModelInfer(request, timeout=30)
                        await asyncio.sleep(rng.uniform(0, 0.006))
                        call.cancel()
                        await call
                    else:
                        await normal.ModelInfer(request, timeout=30)
                    code = "OK"
                except asyncio.CancelledError:
                    code = "CANCELLED"
                except grpc.RpcError as error:
                    code = error.code().name
            outcomes[f"{kind} {code}"] += 1

        await asyncio.gather(*(one(kind) for kind in kinds))
    return outcomes
