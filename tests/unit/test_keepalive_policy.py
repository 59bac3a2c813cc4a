"""The service's gRPC ping policy is Triton's, and the REST gateway's keepalive fits it.

A call that carries no data (a queued REST request, a quiet stream, the gateway's own
link call) and is pinged more often than the service's min recv ping interval gets a
strike per ping; past ``max_ping_strikes`` grpc closes the connection with every call on
it, "Too many pings". The gateway pinged every 30 s against Triton's 300 s: its quiet
requests were cut off after a few minutes. Here the same grpc mechanism runs in seconds:
short policy flags on the service's side, and the client's own throttle of pings without
data (grpc waits a minute after two) lifted, so that every ping reaches the server.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from gateway.channel import channel_options
from gateway.config import DEFAULT_KEEPALIVE_MS, SERVICE_MIN_PING_INTERVAL_MS
from gateway.config import parse_args as gateway_args
from service.config import ServerConfig, parse_args
from service.triton_flags import GRPC_KEEPALIVE_DEFAULTS

MIN_INTERVAL = "grpc.http2.min_ping_interval_without_data_ms"


def _server_arguments(tmp_path: Path, *flags: str) -> dict[str, int]:
    return dict(parse_args(["--model-repository", str(tmp_path), *flags]).grpc_arguments)


def test_the_service_sets_tritons_keepalive_options(tmp_path: Path) -> None:
    """Triton's KeepAliveOptions (grpc_server.h, 2.51), given or not."""
    triton = {
        "grpc.keepalive_time_ms": 7_200_000,
        "grpc.keepalive_timeout_ms": 20_000,
        "grpc.keepalive_permit_without_calls": 0,
        "grpc.http2.max_pings_without_data": 2,
        MIN_INTERVAL: 300_000,
        "grpc.http2.max_ping_strikes": 2,
    }
    assert triton == GRPC_KEEPALIVE_DEFAULTS
    assert _server_arguments(tmp_path) == triton
    assert dict(ServerConfig(model_repositories=(tmp_path,)).grpc_arguments) == triton


def test_flags_override_the_defaults_and_a_zero_connection_age_is_unset(
    tmp_path: Path,
) -> None:
    given = _server_arguments(
        tmp_path,
        "--grpc-http2-min-recv-ping-interval-without-data=5000",
        "--grpc-max-connection-age=0",
        "--grpc-max-connection-age-grace=60000",
    )
    assert given[MIN_INTERVAL] == 5000
    assert "grpc.max_connection_age_ms" not in given  # Triton sets it only when not 0
    assert given["grpc.max_connection_age_grace_ms"] == 60000


def test_the_gateways_keepalive_fits_the_services_default_policy() -> None:
    """The defect: 30 s against 300 s. The gateway's copy of the interval is the service's."""
    assert GRPC_KEEPALIVE_DEFAULTS[MIN_INTERVAL] == SERVICE_MIN_PING_INTERVAL_MS
    assert DEFAULT_KEEPALIVE_MS >= SERVICE_MIN_PING_INTERVAL_MS
    assert gateway_args([]).grpc_keepalive_ms == DEFAULT_KEEPALIVE_MS
    assert ("grpc.keepalive_time_ms", DEFAULT_KEEPALIVE_MS) in channel_options()
    assert gateway_args(["--grpc-keepalive-ms", "1100"]).grpc_keepalive_ms == 1100


#: The service's --grpc-http2-min-recv-ping-interval-without-data here: above the second
#: grpc's client waits at least between two pings.
POLICY_MS = 2000
QUIET_S = 9.0


@pytest.fixture
async def quiet_service(tmp_path: Path) -> AsyncIterator[int]:
    """A grpc.aio server with the service's arguments for a short ping interval, and one
    method that answers only after QUIET_S seconds: a call with no data meanwhile."""

    async def quiet(request: bytes, context: Any) -> bytes:
        await asyncio.sleep(QUIET_S)
        return request

    flag = f"--grpc-http2-min-recv-ping-interval-without-data={POLICY_MS}"
    server = grpc.aio.server(options=list(_server_arguments(tmp_path, flag).items()))
    handler = grpc.unary_unary_rpc_method_handler(quiet)
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("t.Quiet", {"Wait": handler}),)
    )
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield port
    finally:
        await server.stop(None)


def _quiet_call(port: int, keepalive_ms: int) -> str:
    """One quiet call on a channel with the gateway's options; its outcome."""
    options = [*channel_options(keepalive_ms), ("grpc.http2.max_pings_without_data", 0)]
    with grpc.insecure_channel(f"127.0.0.1:{port}", options=options) as channel:
        try:
            channel.unary_unary("/t.Quiet/Wait")(b"x", timeout=QUIET_S + 30)
        except grpc.RpcError as exc:
            call: grpc.Call = exc  # type: ignore[assignment]
            return f"{call.code().name}: {call.details()}"
    return "OK"


async def test_pings_as_often_as_the_policy_lets_them_keep_a_quiet_call(
    quiet_service: int,
) -> None:
    """10% above the interval, as scripts/serve.sh sets the gateway's from the service's
    flag: several pings during the call, none struck."""
    keepalive = POLICY_MS * 11 // 10
    assert await asyncio.to_thread(_quiet_call, quiet_service, keepalive) == "OK"


async def test_pings_more_often_cut_a_quiet_call_off(quiet_service: int) -> None:
    """What the gateway did: the third strike closes the connection."""
    outcome = await asyncio.to_thread(_quiet_call, quiet_service, POLICY_MS // 5)
    assert outcome == "UNAVAILABLE: Too many pings"
