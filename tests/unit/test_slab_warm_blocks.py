"""Large slab blocks stay warm for a while after they are freed (service/channel/slabs.py):
the next large tensor reuses the same pages (no faults in the writer or the reader), and
pages idle for their warm time (WARM_SECONDS, longer for larger blocks) go back to the
system; a failed request's block gives them back at once. What the block holds tells
which happened: a punched-out block reads as zeros."""

from __future__ import annotations

import asyncio

from service.channel.slabs import WARM_SECONDS, Arena, warm_seconds

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


def test_larger_blocks_stay_warm_longer() -> None:
    """As long as moving the block at 32 MiB/s takes, at least WARM_SECONDS: a client
    sending tensors one at a time sends the next about a round trip later."""
    assert warm_seconds(16 << 20) == WARM_SECONDS
    assert warm_seconds(64 << 20) == 2.0
    assert warm_seconds(1 << 30) == 32.0


def test_a_64_mib_block_outlives_the_short_warm_time_then_goes_back() -> None:
    big = 64 << 20

    async def run() -> None:
        arena = Arena(1 << 30)
        try:
            small = arena.alloc(LARGE)
            offset = arena.alloc(big)
            arena.write(offset, b"\x05" * big)
            _fill(arena, small, 3)
            arena.free(offset)
            arena.free(small)  # due earlier: it is released first
            await asyncio.sleep(WARM_SECONDS * 1.5)
            assert arena.warm_bytes == big  # the 16 MiB block went, the 64 MiB one stays
            assert arena.view[offset + big - 1] == 5
            # Its release is due before this sleep ends, on this loop: it has run.
            await asyncio.sleep(warm_seconds(big))
            assert arena.warm_bytes == 0
            assert arena.alloc(big) == offset and arena.view[offset + big - 1] == 0
        finally:
            arena.close()

    asyncio.run(run())


def test_a_failed_requests_block_goes_back_at_once() -> None:
    async def run() -> None:
        arena = Arena(256 << 20)
        try:
            offset = arena.alloc(LARGE)
            _fill(arena, offset, 4)
            arena.free(offset, keep_warm=False)
            assert arena.warm_bytes == 0
            assert arena.view[arena.alloc(LARGE) + LARGE - 1] == 0
        finally:
            arena.close()

    asyncio.run(run())
