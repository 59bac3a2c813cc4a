"""Fixtures shared by every test environment (standard library and pytest only)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from server_process import DEFAULT_REPOSITORY, ServerProcess


@pytest.fixture(scope="session")
def default_server() -> Iterator[ServerProcess]:
    """One real server on the embedded default repository, shared by a whole session."""
    server = ServerProcess([DEFAULT_REPOSITORY]).start()
    try:
        yield server
    finally:
        code = server.stop()
        assert code == 0, f"server exited with {code}:\n{server.log}"
