"""The private call a REST gateway holds on the service (decision 033), and what it now
also carries (decision 053): whether the gateway holds HTTP connections, which the
process that takes the stop signal reads to refuse new requests at once or not.

A real grpc.aio server with the service's side (``GatewayLinks``) and the gateway's side
(``ServiceLink``, its own thread and sync channel) over loopback.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import grpc
import pytest

from gateway.service_link import ServiceLink
from service.grpc_frontend.gateway_link import GatewayLinks
from wire import gateway_link


async def _until(check: Callable[[], bool]) -> None:
    """Until ``check()`` holds (the other side's thread or task gets there), 10 s at most."""
    for _ in range(1000):
        if check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("not reached in 10 s")


@pytest.fixture
async def links() -> AsyncIterator[tuple[GatewayLinks, list[int], str]]:
    counts: list[int] = []
    following = GatewayLinks(on_busy=counts.append)
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((following.rpc_handler(),))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield following, counts, f"127.0.0.1:{port}"
    finally:
        await server.stop(0)


async def test_the_service_follows_whether_the_gateway_holds_connections(
    links: tuple[GatewayLinks, list[int], str],
) -> None:
    following, counts, target = links
    stops: list[float] = []
    with grpc.insecure_channel(target) as channel:
        link = ServiceLink(channel, stops.append)
        link.set_busy(False)  # before the call: its first frame says so
        await asyncio.to_thread(link.start, 10.0)
        assert link.linked.is_set()
        await _until(lambda: following.following == 1 and following.busy == 0)
        link.set_busy(True)  # the first HTTP connection opened
        await _until(lambda: following.busy == 1)
        link.set_busy(False)  # the last one closed
        await _until(lambda: following.busy == 0)
        assert counts[-3:] == [0, 1, 0]
        # The stop: the notice with the exit timeout, then the gateway's report.
        stopping = asyncio.create_task(following.stop_http(7.0))
        await _until(lambda: stops == [7.0])
        await asyncio.to_thread(link.report, 5.0)
        assert await stopping == 5.0
        await _until(lambda: following.following == 0)


async def test_a_follower_that_has_not_said_counts_as_holding_connections(
    links: tuple[GatewayLinks, list[int], str],
) -> None:
    """An older gateway, or one whose first frame is on its way: the stop must not refuse
    the requests its HTTP connections may still send."""
    following, counts, target = links
    async with grpc.aio.insecure_channel(target) as channel:
        call = channel.stream_stream(gateway_link.PATH)()
        await call.initial_metadata()
        assert following.busy == 1 and counts == [1]
        await call.write(gateway_link.encode(gateway_link.BUSY, 0))
        await _until(lambda: following.busy == 0)
        call.cancel()
        await _until(lambda: following.following == 0)
    assert counts == [1, 0]


async def test_the_report_carries_the_requests_cut_off(
    links: tuple[GatewayLinks, list[int], str],
) -> None:
    """A gateway that spent the exit timeout on connections with requests still running
    says how many it cut off: work left at the exit timeout, so the service exits 1."""
    following, _, target = links
    stops: list[float] = []
    with grpc.insecure_channel(target) as channel:
        link = ServiceLink(channel, stops.append)
        await asyncio.to_thread(link.start, 10.0)
        await _until(lambda: following.following == 1)
        stopping = asyncio.create_task(following.stop_http(3.0))
        await _until(lambda: stops == [3.0])
        await asyncio.to_thread(link.report, 0.0, 2)
        assert await stopping == 0.0
    assert following.cut == 2


async def test_a_report_never_gives_more_than_the_service_has_left(
    links: tuple[GatewayLinks, list[int], str],
) -> None:
    """A gateway signalled on its own counts its own exit timeout down (serve.sh signals
    both): what it reports is capped at what the service's clock has left, and an older
    gateway's report (no ``cut``) counts as none cut off."""
    following, _, target = links
    async with grpc.aio.insecure_channel(target) as channel:
        call = channel.stream_stream(gateway_link.PATH)()
        await call.initial_metadata()
        stopping = asyncio.create_task(following.stop_http(3.0))
        assert gateway_link.seconds(await call.read(), gateway_link.STOP) == 3.0
        await call.write(gateway_link.encode(gateway_link.LEFT, 29.0))
        assert await stopping <= 3.0  # the clock's whole seconds left, not the 29
        await call.done_writing()
    assert following.cut == 0
