"""Large outputs leased from the engine's arena (service/channel/leases.py): a view of the
block, the block given back (one FREE per loop iteration) only once every view made from
it is gone, so no byte a serializer still reads can be overwritten."""

from __future__ import annotations

import asyncio
import gc

import numpy as np

from service.channel.leases import LEASE_MIN_BYTES, Leases
from service.channel.messages import decode_response, encode_response
from service.channel.slabs import Arena, ArenaMap
from service.types import InferResponse, OutputTensor


def test_a_block_goes_back_only_when_its_last_view_is_gone() -> None:
    async def run() -> None:
        arena = Arena(64 << 20)
        reader = ArenaMap(_dup(arena.fd), arena.size)
        sent: list[list[int]] = []
        leases = Leases(reader, sent.append, asyncio.get_running_loop())
        offset = arena.alloc(LEASE_MIN_BYTES)
        arena.write(offset, b"\x05" * LEASE_MIN_BYTES)
        view = leases.lease(offset, LEASE_MIN_BYTES)
        part = view[10:20]  # a view of the view keeps the block too
        del view
        gc.collect()
        await asyncio.sleep(0)
        assert sent == [] and leases.outstanding == 1
        assert bytes(part) == b"\x05" * 10
        del part
        gc.collect()
        await asyncio.sleep(0)
        assert sent == [[offset]] and leases.outstanding == 0
        reader.close()
        arena.close()

    asyncio.run(run())


def test_decode_response_leases_large_outputs_and_copies_small_ones() -> None:
    async def run() -> None:
        arena = Arena(64 << 20)
        reader = ArenaMap(_dup(arena.fd), arena.size)
        sent: list[list[int]] = []
        leases = Leases(reader, sent.append, asyncio.get_running_loop())
        outputs = [
            OutputTensor("BIG", "UINT8", np.full(LEASE_MIN_BYTES, 3, np.uint8)),
            OutputTensor("SMALL", "UINT8", np.full(64 << 10, 4, np.uint8)),
        ]
        values = encode_response(InferResponse("m", "1", "id", outputs), arena)
        big = values[3][0][3][0]  # (name, datatype, shape, (offset, size))
        small = values[3][1][3][0]
        freed: list[int] = []
        response = decode_response(values, reader, freed, leases.lease)
        assert type(response.outputs[0].wire) is memoryview
        assert bytes(response.outputs[0].wire[:3]) == b"\x03\x03\x03"
        assert type(response.outputs[1].wire) is bytes and freed == [small]
        del response, values
        gc.collect()
        await asyncio.sleep(0)
        assert sent == [[big]]
        reader.close()
        arena.close()

    asyncio.run(run())


def _dup(fd: int) -> int:
    import os

    return os.dup(fd)
