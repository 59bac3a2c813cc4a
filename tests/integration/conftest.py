"""Fixtures for the integration tests: real servers driven through tritonclient."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import tritonclient.grpc as grpcclient
from server_process import ServerProcess


@pytest.fixture(scope="session")
def client(default_server: ServerProcess) -> Iterator[grpcclient.InferenceServerClient]:
    """A sync client on the shared default-repository server."""
    with grpcclient.InferenceServerClient(default_server.url) as c:
        yield c
