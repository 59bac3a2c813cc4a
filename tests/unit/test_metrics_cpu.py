"""CPU metrics: exact exposition text and utilisation from fixed /proc texts, the "off"
paths (one INFO line each), the polling thread, the flag, and a reading of the real /proc."""

from __future__ import annotations

import logging
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from service.config import parse_args
from service.runtime import _joined
from service.statistics import ModelStats
from service.telemetry.cpu import CpuMetrics, cpu_utilization, parse_meminfo, parse_stat
from service.telemetry.metrics import MetricsRenderer

# user nice system idle iowait irq softirq steal guest guest_nice, then per-CPU lines.
STAT_1 = (
    "cpu  100 20 50 800 30 5 5 0 100 0\n"
    "cpu0 50 10 25 400 15 3 2 0 50 0\n"
    "cpu1 50 10 25 400 15 2 3 0 50 0\n"
    "intr 12345 0 0\nctxt 999\n"
)
# Deltas: busy 80+10+20+4+4+2 = 120, idle 30+10 = 40 -> 0.75; guest (+50) is already in
# user, so it must not count twice.
STAT_2 = "cpu  180 30 70 830 40 9 9 2 150 0\ncpu0 90 15 35 415 20 5 4 1 75 0\n"
MEMINFO = (
    "MemTotal:       16384000 kB\n"
    "MemFree:         1024000 kB\n"
    "MemAvailable:    4096000 kB\n"
    "Buffers:          512000 kB\n"
    "HugePages_Total:       0\n"
)
TOTAL_BYTES, USED_BYTES = 16_384_000 * 1024, (16_384_000 - 4_096_000) * 1024

MEMORY_TEXT = (
    "# HELP nv_cpu_memory_total_bytes CPU total memory (RAM), in bytes\n"
    "# TYPE nv_cpu_memory_total_bytes gauge\n"
    f"nv_cpu_memory_total_bytes {TOTAL_BYTES}\n"
    "# HELP nv_cpu_memory_used_bytes CPU used memory (RAM), in bytes\n"
    "# TYPE nv_cpu_memory_used_bytes gauge\n"
    f"nv_cpu_memory_used_bytes {USED_BYTES}\n"
)


class FakeProc:
    """Texts the collector reads, changed between polls by the test; an exception is raised."""

    def __init__(self, stat: str | Exception = STAT_1, meminfo: str | Exception = MEMINFO) -> None:
        self.stat = stat
        self.meminfo = meminfo

    @staticmethod
    def _read(value: str | Exception) -> str:
        if isinstance(value, Exception):
            raise value
        return value

    def collector(self, interval_s: float = 2.0, platform: str = "linux") -> CpuMetrics:
        return CpuMetrics(
            interval_s,
            read_stat=lambda: self._read(self.stat),
            read_meminfo=lambda: self._read(self.meminfo),
            platform=platform,
        )


def test_exposition_text_is_triton_s() -> None:
    proc = FakeProc()
    cpu = proc.collector()
    assert cpu.start(poll=False)
    # One reading gives memory; utilisation needs a second one (no made-up 0 before it).
    assert cpu.render() == MEMORY_TEXT
    proc.stat = STAT_2
    cpu.poll_once()
    assert cpu.render() == (
        "# HELP nv_cpu_utilization CPU utilization rate [0.0 - 1.0]\n"
        "# TYPE nv_cpu_utilization gauge\n"
        "nv_cpu_utilization 0.75\n" + MEMORY_TEXT
    )
    cpu.stop()


def test_parsers() -> None:
    assert parse_stat(STAT_1) == (100, 20, 50, 800, 30, 5, 5, 0)
    assert parse_stat("cpu 1 2 3 4\n") == (1, 2, 3, 4, 0, 0, 0, 0)  # pre-2.6 kernels
    assert parse_meminfo(MEMINFO) == (TOTAL_BYTES, USED_BYTES)
    for bad in ("cpu0 1 2 3 4\n", "", "cpu 1 2 3\n", "cpu a b c d\n"):
        with pytest.raises(ValueError):
            parse_stat(bad)
    for bad in ("MemTotal: 10 kB\n", "MemTotal: 10 kB\nMemAvailable: 11 kB\n", "MemTotal:\n"):
        with pytest.raises(ValueError):
            parse_meminfo(bad)


@pytest.mark.parametrize(
    ("new", "expected"),
    [
        ((110, 0, 0, 100, 0, 0, 0, 0), 1.0),  # busy only
        ((100, 0, 0, 150, 50, 0, 0, 0), 0.0),  # idle and iowait only
        ((100, 0, 0, 100, 0, 0, 0, 0), None),  # no jiffy elapsed
        ((90, 0, 10, 130, 0, 0, 0, 0), 0.25),  # user went backwards: counts 0
    ],
)
def test_utilization(new: tuple[int, ...], expected: float | None) -> None:
    assert cpu_utilization(new, (100, 0, 0, 100, 0, 0, 0, 0)) == expected


def test_a_poll_without_elapsed_jiffies_keeps_the_last_value_and_baseline() -> None:
    proc = FakeProc()
    cpu = proc.collector()
    assert cpu.start(poll=False)
    proc.stat = STAT_2
    cpu.poll_once()
    cpu.poll_once()  # same text: no jiffy elapsed
    assert "nv_cpu_utilization 0.75\n" in cpu.render()
    proc.stat = "cpu  180 30 70 870 40 9 9 2 150 0\n"  # 40 idle jiffies more than STAT_2
    cpu.poll_once()
    assert "nv_cpu_utilization 0\n" in cpu.render()


def test_an_unreadable_file_while_polling_leaves_its_families_out_and_logs_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    proc = FakeProc()
    cpu = proc.collector()
    assert cpu.start(poll=False)
    proc.stat, proc.meminfo = STAT_2, PermissionError("denied")
    with caplog.at_level(logging.INFO, logger="service.telemetry.cpu"):
        cpu.poll_once()
        cpu.poll_once()
    assert cpu.render() == (
        "# HELP nv_cpu_utilization CPU utilization rate [0.0 - 1.0]\n"
        "# TYPE nv_cpu_utilization gauge\n"
        "nv_cpu_utilization 0.75\n"
    )
    assert [r.getMessage() for r in caplog.records] == [
        "CPU metrics: /proc/meminfo unavailable (denied)"
    ]
    proc.meminfo = MEMINFO
    cpu.poll_once()
    assert cpu.render().endswith(MEMORY_TEXT)


def test_rendered_after_the_model_and_gpu_metrics() -> None:
    cpu = FakeProc().collector()
    assert cpu.start(poll=False)

    @dataclass
    class Model:
        name: str = "m"
        version: int = 1
        stats: ModelStats = field(default_factory=ModelStats)
        scheduler: None = None

    gpu_text = 'nv_gpu_utilization{gpu_uuid="GPU-a"} 0\n'
    extra = _joined([lambda: gpu_text, cpu.render])
    text = MetricsRenderer(lambda: [Model()], extra=extra).render().decode()
    assert text.index("nv_inference_request_success") < text.index(gpu_text)
    assert text.endswith(gpu_text + MEMORY_TEXT)
    assert _joined([]) is None
    cpu.stop()


@pytest.mark.parametrize(
    ("proc", "platform", "reason"),
    [
        (FakeProc(), "darwin", "read from /proc, which darwin lacks"),
        (FakeProc(stat=FileNotFoundError("no /proc/stat")), "linux", "no /proc/stat"),
        (FakeProc(stat="garbage\n"), "linux", "no aggregate 'cpu' line"),
        (FakeProc(meminfo="MemTotal: 1 kB\n"), "linux", "MemAvailable missing"),
    ],
    ids=["not-linux", "unreadable", "unparsable-stat", "old-kernel-meminfo"],
)
def test_no_cpu_metrics_and_one_info_line(
    proc: FakeProc, platform: str, reason: str, caplog: pytest.LogCaptureFixture
) -> None:
    cpu = proc.collector(platform=platform)
    with caplog.at_level(logging.DEBUG, logger="service.telemetry"):
        assert not cpu.start()
    assert [r.levelname for r in caplog.records] == ["INFO"]
    assert reason in caplog.records[0].getMessage()
    assert cpu.render() == ""
    cpu.poll_once()  # never started: reads nothing
    assert cpu.render() == ""
    cpu.stop()
    assert cpu._thread is None


def test_polling_thread_follows_the_interval_and_stops() -> None:
    proc = FakeProc()
    cpu = proc.collector(interval_s=0.01)
    assert cpu.start()
    proc.stat = STAT_2
    deadline = time.monotonic() + 5
    while "nv_cpu_utilization 0.75\n" not in cpu.render():
        assert time.monotonic() < deadline, cpu.render()
        time.sleep(0.005)
    cpu.stop()
    assert cpu._thread is None


def test_allow_cpu_metrics_flag(tmp_path: Path) -> None:
    assert parse_args(["--model-repository", str(tmp_path)]).metrics.cpu
    for off in ("--allow-cpu-metrics=false", "--allow-cpu-metrics=0"):
        assert not parse_args(["--model-repository", str(tmp_path), off]).metrics.cpu
    assert parse_args(["--model-repository", str(tmp_path), "--allow-cpu-metrics"]).metrics.cpu


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc is Linux's")
def test_real_proc() -> None:
    cpu = CpuMetrics()
    assert cpu.start(poll=False)
    time.sleep(0.05)  # at least a few jiffies on a 100 Hz clock, summed over all CPUs
    cpu.poll_once()
    values = {
        line.split()[0]: float(line.split()[1])
        for line in cpu.render().splitlines()
        if not line.startswith("#")
    }
    assert set(values) <= {
        "nv_cpu_utilization",
        "nv_cpu_memory_total_bytes",
        "nv_cpu_memory_used_bytes",
    }
    assert 0.0 <= values.get("nv_cpu_utilization", 0.0) <= 1.0
    assert 0 < values["nv_cpu_memory_used_bytes"] <= values["nv_cpu_memory_total_bytes"]
    cpu.stop()
