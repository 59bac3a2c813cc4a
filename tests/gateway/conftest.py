"""Fixtures for the gateway's client-side tests: a real service and a real gateway process.

Runs in the client environment (.venv-client, tritonclient): nothing here imports
``service``, ``gateway`` or ``inference``; both servers run from .venv as subprocesses.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

import pytest
from gateway_process import GatewayProcess
from server_process import ServerProcess


@contextlib.contextmanager
def running_gateway(grpc_target: str, extra_args: Sequence[str] = ()) -> Iterator[GatewayProcess]:
    """A gateway that must stop cleanly (exit code 0) when the block ends."""
    gateway = GatewayProcess(grpc_target, extra_args).start()
    try:
        yield gateway
    finally:
        code = gateway.stop()
        assert code == 0, f"gateway exited with {code}:\n{gateway.log}"


@pytest.fixture(scope="session")
def gateway(default_server: ServerProcess) -> Iterator[GatewayProcess]:
    """One gateway in front of the shared default-repository service."""
    with running_gateway(default_server.url) as gw:
        yield gw
