"""The benchmarks' own measures: a split server's CPU is found in its children, the
engine's loop thread is told apart, and each mode's throughput is set against the first.

A measure that read only the supervisor's own process would show a split server as
nearly free (its frontends and engine are children), which is what loadgen reported
before it summed the process tree.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from loadtest import metrics, mlserver
from loadtest.loadgen import drive
from loadtest.scenario import parse
from loadtest.scenarios import batching, cpu_bench, scaling_bench

# A parent that idles while its child burns 0.4 s of CPU and then stays alive (only live
# descendants are counted); the parent ends the child when its stdin closes.
_PARENT = """
import subprocess, sys
burn = "import time\\nend = time.process_time() + 0.4\\n"
burn += "while time.process_time() < end: pass\\ntime.sleep(60)\\n"
child = subprocess.Popen([sys.executable, "-c", burn])
sys.stdin.read()
child.kill()
child.wait()
"""


def test_tree_cpu_counts_a_busy_child() -> None:
    parent = subprocess.Popen([sys.executable, "-c", _PARENT], stdin=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        tree = 0.0
        while time.monotonic() < deadline:
            tree = metrics.tree_cpu_seconds(parent.pid) or 0.0
            if tree >= 0.4:
                break
            time.sleep(0.05)
        own = metrics.process_cpu_seconds(parent.pid) or 0.0
        assert tree >= 0.4  # the child's burn is in the tree
        assert own < 0.4  # and not in the parent's own figure
    finally:
        parent.communicate(b"", timeout=30)


def test_tree_cpu_of_a_missing_process_is_none() -> None:
    # Pid numbers wrap, but never past the kernel's largest possible pid.
    assert metrics.tree_cpu_seconds(4_194_304 + 1) is None
    assert metrics.process_cpu_seconds(4_194_304 + 1) is None


def test_thread_cpu_names_the_loop_thread_main() -> None:
    threads = metrics.thread_cpu_seconds(os.getpid())
    assert "main" in threads
    user, system = threads["main"]
    assert user >= 0 and system >= 0


def test_engine_cpu_without_an_engine_is_nan() -> None:
    total, loop = metrics.engine_cpu(None)
    assert total != total and loop != loop  # NaN: the one-process layout has no engine
    total, loop = metrics.engine_cpu(os.getpid())
    assert total >= loop >= 0


def test_scaling_lines_set_each_mode_against_the_first() -> None:
    rows = {
        (1, "add_sub c=64"): [{"rps": 1000.0}, {"rps": 3000.0}],  # median 2000
        (8, "add_sub c=64"): [{"rps": 8000.0}],
    }
    lines = scaling_bench.scaling_lines(rows, [1, 8])
    assert "| add_sub c=64 | 4.00 x |" in lines
    assert not any(line.startswith("| add_sub c=8 ") for line in lines)  # not run: left out
    assert scaling_bench.scaling_lines(rows, [8]) == []


def test_mlp_parameters_reach_both_configs(tmp_path: Path) -> None:
    args = parse(batching.Batching, ["--quick", "--mlp-parameter", "intra_op_thread_count=8"])
    parameters = dict(args.mlp_parameter)
    assert parameters == {"intra_op_thread_count": "8"}
    # a tiny MLP: only the config text matters here
    batching.build_repository(tmp_path, 500, parameters, width=8)
    for name in batching.MLP_MODELS:
        text = (tmp_path / name / "config.pbtxt").read_text()
        assert 'key: "intra_op_thread_count"' in text
        assert 'string_value: "8"' in text


@pytest.mark.parametrize("bad", ["novalue", "=8"])
def test_mlp_parameter_without_key_and_value_is_refused(bad: str) -> None:
    with pytest.raises(SystemExit):
        parse(batching.Batching, ["--mlp-parameter", bad])


class _Sample:
    def __init__(self, cpu_us: float) -> None:
        self.cpu_us, self.req_s = cpu_us, 1000.0


class _Server:
    def __init__(self, label: str, cpu: dict[str, float], p50: list[float]) -> None:
        self.label, self.p50_ms, self.p50_rest_ms = label, p50, []
        self.samples = {key: [_Sample(value)] for key, value in cpu.items()}


def test_cpu_targets_keep_only_what_the_run_measured() -> None:
    servers = [
        _Server("bare", {"add_sub": 200.0}, []),
        _Server("ours", {"add_sub": 230.0}, []),
        _Server("c7e75ef", {"add_sub": 240.0}, []),
    ]
    lines = cpu_bench._targets(servers, {"add_sub"})
    assert lines[2:] == ["| add_sub c=8: ours / bare | 1.15 | ≤ 1.30 | yes |"]
    servers[1].samples["add_sub_batch"] = [_Sample(220.0)]
    servers[1].p50_ms, servers[2].p50_ms = [0.6], [0.55]
    lines = cpu_bench._targets(servers, {"add_sub", "add_sub_batch"})
    assert "| add_sub: batching c=32 vs unbatched c=8 (ours, µs/req) | 220 vs 230 |" in "\n".join(
        lines
    )
    assert (
        "| add_sub p50 at c=1: ours vs c7e75ef (ms) | 0.600 vs 0.550 | ≤ c7e75ef + 0.1 ms | yes |"
        in lines
    )
    assert not any("identity" in line or "nan" in line for line in lines)


def test_rest_p50_gets_its_own_row_against_triton_and_mlserver_none() -> None:
    """Issue 37: ours within 1.5 x Triton's p50 over gRPC and over REST, each its own row;
    MLServer is rated by req/s only."""
    servers = [
        _Server("bare", {}, []),
        _Server("ours", {}, [0.6]),
        _Server("Triton", {}, [0.3]),
        _Server("MLServer", {}, [1.0]),
    ]
    servers[1].p50_rest_ms, servers[2].p50_rest_ms = [0.5], [0.4]
    lines = cpu_bench._targets(servers, set(), p50_of="simple")
    assert lines[2:] == [
        "| simple p50 at c=1: ours vs Triton (ms) | 0.600 vs 0.300 | ≤ 1.5 x Triton | NO |",
        "| simple p50 at c=1 over REST: ours vs Triton (ms) | 0.500 vs 0.400 | ≤ 1.5 x Triton "
        "| yes |",
    ]


def test_the_mlserver_folder_turns_off_what_ours_and_triton_run_without(tmp_path: Path) -> None:
    root = cpu_bench.mlserver_copy(tmp_path / "mls", workers=0)
    settings = json.loads((root / "settings.json").read_text())
    assert settings["debug"] is False and settings["metrics_endpoint"] is None
    assert settings["parallel_workers"] == 0 and settings["host"] == "127.0.0.1"
    assert (root / "mlserver_runtime.py").read_text() == mlserver.RUNTIME.read_text()
    models = {p.parent.name: json.loads(p.read_text()) for p in root.glob("*/model-settings.json")}
    assert set(models) == {"add_sub", "add_sub_batch", "add_sub_py", "identity_1m", "served"}
    assert all(m["name"] == name for name, m in models.items())
    assert models["add_sub_batch"]["max_batch_size"] == 8
    assert models["add_sub_batch"]["max_batch_time"] > 0  # at 0 MLServer batches nothing
    assert models["identity_1m"]["implementation"] == "mlserver_runtime.Identity"
    assert models["served"]["implementation"] == "mlserver_runtime.Served"


def test_quick_sets_its_values_and_leaves_the_rest() -> None:
    args = parse(cpu_bench.CpuBench, ["--quick", "--only", "add_sub"])
    assert (args.duration, args.rounds, args.latency_seconds, args.only) == (
        3.0,
        1,
        3.0,
        ["add_sub"],
    )
    full = parse(cpu_bench.CpuBench, ["--rounds", "5"])
    assert (full.duration, full.rounds, full.latency_seconds) == (8.0, 5, 6.0)


async def test_drive_ends_at_its_cap_not_at_the_window_end() -> None:
    """A capped window (scaling-bench's p50 of N requests) returns once the cap is sent,
    with the sample's change over what really ran."""
    ticks = iter(range(1000))

    async def call() -> None:
        await asyncio.sleep(0)

    window = await asyncio.wait_for(
        drive([call, call], 0.0, 60.0, cap=50, sample=lambda: (float(next(ticks)),)), 10
    )
    assert window.report.capped and window.report.sent == 50
    assert window.requests == 50 and window.deltas == (1.0,)
    assert 0 < window.seconds < 10


async def test_drive_raises_on_a_failed_call() -> None:
    async def call() -> None:
        raise RuntimeError("gateway answered b'HTTP/1.1 500'")

    with pytest.raises(RuntimeError, match="calls failed; first: RuntimeError: gateway"):
        await drive([call], 0.0, 0.2)


def test_engine_bench_starts_its_engine_and_measures_its_loop() -> None:
    """engine-bench spawns ``run_engine`` as the supervisor does (with the refusal flags'
    ``Admission``); it failed at start once that argument was added."""
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [
            *(sys.executable, "-m", "loadtest", "engine-bench", "--rounds", "1"),
            *("--duration", "0.5", "--warmup", "0.2", "--concurrency", "4"),
            *("--models", "add_sub_nobatch"),
        ],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    (row,) = [line for line in done.stdout.splitlines() if line.startswith("| add_sub_nobatch |")]
    requests_per_s = float(row.split("|")[2].replace(",", ""))
    assert requests_per_s > 0
