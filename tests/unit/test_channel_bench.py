"""``loadtest channel-bench``'s drivers against their echo processes: each transport
carries messages both ways at several outstanding, and the window's figures are counted
from both processes (a driver that lost messages would hang or count none)."""

from __future__ import annotations

import math

import pytest

from loadtest.scenario import parse
from loadtest.scenarios import channel_bench
from wire import ring


@pytest.mark.parametrize("kind", channel_bench.KINDS)
def test_every_transport_echoes_and_is_measured(kind: str) -> None:
    if kind.startswith("ring") and not ring.SUPPORTED:
        pytest.skip("the ring needs x86-64")
    driver = channel_bench.DRIVERS[kind]()
    try:
        for outstanding in (1, 8):
            figures = channel_bench._window(driver, outstanding, 0.05, 0.2)
            assert figures["rate"] > 0
            # CPU and wake-ups per message are measured, not bounded: the kernel's
            # per-process user / system split may step back by a tick when threads end,
            # and a thread that ends takes its context switches out of /proc's task list
            assert all(math.isfinite(figures[key]) for key in ("client_us", "echo_us", "wakeups"))
        assert driver.child.poll() is None  # the echo side still serves
    finally:
        driver.close()
    assert driver.child.returncode == 0  # and ended cleanly when its end closed


def test_the_report_has_a_row_per_transport_and_outstanding_count() -> None:
    args = parse(channel_bench.ChannelBench, ["--concurrency", "1", "8", "--rounds", "1"])
    figures = {"rate": 10.0, "wall_us": 1.0, "client_us": 2.0, "echo_us": 3.0, "wakeups": 0.5}
    results = {(kind, n): [figures] for kind in channel_bench.KINDS for n in (1, 8)}
    report = channel_bench._report(args, results)
    rows = [
        line for line in report.splitlines() if line.startswith("| ") and "transport" not in line
    ]
    assert len(rows) == 2 * len(channel_bench.KINDS)
    assert "| ring | 8 | 10 | 1.0 | 2.0 | 3.0 | 5.0 | 1.00 | 0.50 |" in report
