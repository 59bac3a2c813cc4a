"""Large slab blocks stay warm for a moment after they are freed (service/channel/slabs.py):
the next large tensor reuses the same pages (no faults in the writer or the reader), and
pages idle for WARM_SECONDS go back to the system. What the block holds tells which
happened: a punched-out block reads as zeros."""

from __future__ import annotations

import asyncio

from service.channel.slabs import WARM_SECONDS, Arena

LARGE = 16 << 20  # the smallest class that gives its pages back


def _fill(arena: Arena, offset: int, value: int) -> None:
    arena.write(offset, bytes([value]) * LARGE)


def test_a_block_reused_at_once_keeps_its_pages_and_an_idle_one_gives_them_back() -> None:
    async def run() -> None:
        arena = Arena(256 << 20)
        try:
            first = arena.alloc(LARGE)
            _fill(arena, first, 7)
            arena.free(first)
            assert arena.warm_bytes == LARGE
            again = arena.alloc(LARGE)
            assert again == first and arena.warm_bytes == 0
            assert arena.view[again + LARGE - 1] == 7  # the same pages, still there
            arena.free(again)
            await asyncio.sleep(WARM_SECONDS * 2.5)  # the release runs on this loop
            assert arena.warm_bytes == 0
            last = arena.alloc(LARGE)
            assert last == first
            assert arena.view[last] == 0 and arena.view[last + LARGE - 1] == 0  # punched out
        finally:
            arena.close()

    asyncio.run(run())


def test_without_a_loop_a_large_block_goes_back_at_once() -> None:
    arena = Arena(256 << 20)
    try:
        offset = arena.alloc(LARGE)
        _fill(arena, offset, 9)
        arena.free(offset)
        assert arena.warm_bytes == 0
        assert arena.view[arena.alloc(LARGE)] == 0
    finally:
        arena.close()


def test_closing_with_warm_blocks_cancels_the_release() -> None:
    async def run() -> None:
        arena = Arena(256 << 20)
        offset = arena.alloc(LARGE)
        arena.free(offset)
        arena.close()
        await asyncio.sleep(WARM_SECONDS * 1.5)  # the cancelled release never runs

    asyncio.run(run())
