"""Fixtures shared by every test environment (standard library and pytest only)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from gpu_support import GPU_REQUIRED, no_gpu_reason
from server_process import DEFAULT_REPOSITORY, ServerProcess


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """gpu-marked tests skip with the reason where no GPU is (unless GPU_TESTS=required)."""
    gpu_items = [item for item in items if item.get_closest_marker("gpu") is not None]
    reason = no_gpu_reason() if gpu_items and not GPU_REQUIRED else None
    if reason is not None:
        for item in gpu_items:
            item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="session")
def default_server() -> Iterator[ServerProcess]:
    """One real server on the embedded default repository, shared by a whole session."""
    server = ServerProcess([DEFAULT_REPOSITORY]).start()
    try:
        yield server
    finally:
        code = server.stop()
        assert code == 0, f"server exited with {code}:\n{server.log}"
