"""The cost budget's two reductions: threads into process roles, and a py-spy profile
into where its samples went. A wrong role would send a cut to the wrong process, so the
rules are pinned on the thread names the server's processes really carry."""

from __future__ import annotations

import os
import subprocess
import sys

from loadtest.profile_summary import parse_raw, summary_lines
from loadtest.roles import ProcessKind, classify, per_request, role_of
from loadtest.scenario import parse
from loadtest.scenarios import cost_budget


def test_threads_of_the_split_layout_get_their_roles() -> None:
    assert role_of("frontend", "main", one_process=False) == "frontend loop (grpc.aio + ours)"
    assert role_of("frontend", "event_engine", one_process=False) == "frontend grpc threads"
    assert role_of("engine", "main", one_process=False) == "engine loop"
    assert role_of("engine", "add_sub_0_0", one_process=False) == "engine instance threads"
    assert role_of("engine", "python", one_process=False).startswith("engine other threads")
    assert role_of("python_worker", "main", one_process=False) == "Python model workers"
    assert role_of("gateway", "Thread-3", one_process=False) == "gateway serving threads"


def test_one_process_counts_its_loop_as_the_frontend_loop() -> None:
    """--frontends 0: the one loop does the protocol work and the engine's."""
    assert role_of("engine", "main", one_process=True) == "frontend loop (grpc.aio + ours)"
    assert role_of("engine", "event_engine", one_process=True) == "frontend grpc threads"
    assert role_of("engine", "add_sub_0_0", one_process=True) == "engine instance threads"


def test_per_request_divides_each_role_by_the_counted_requests() -> None:
    kinds = {1: ProcessKind(1, "frontend"), 2: ProcessKind(2, "engine")}
    before = {1: {"main": (1.0, 0.5)}, 2: {"main": (2.0, 0.0), "add_sub_0_0": (0.0, 0.0)}}
    after = {1: {"main": (1.2, 0.6)}, 2: {"main": (2.1, 0.0), "add_sub_0_0": (0.05, 0.0)}}
    roles = per_request(before, after, kinds, requests=1000)
    assert round(roles["frontend loop (grpc.aio + ours)"]) == 300
    assert round(roles["engine loop"]) == 100
    assert round(roles["engine instance threads"]) == 50


def test_a_live_tree_is_classified_by_command_line() -> None:
    """A real child running the Python model stub's module name is a model worker."""
    child = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(30)", "service.backends.python.stub"],
        stdin=subprocess.DEVNULL,
    )
    try:
        kinds = classify(os.getpid(), engine=os.getpid())
        assert kinds[os.getpid()].kind == "engine"
        assert kinds[child.pid].kind == "python_worker"
    finally:
        child.kill()
        child.wait()


_ROOT = "<module> (<string>:1);run_frontend (/x/service/frontend/main.py:62);"
_ROOT += "run (/x/service/loop.py:18);Loop__run (loop.c:20313)"
_GRPC = "0x7f2c34a67739 (/v/site-packages/grpc/_cython/cygrpc.so)"
_SERVICER = "InferenceServicer.ModelInfer (/x/service/grpc_frontend/servicer.py:158)"
RAW = f"""\
{_ROOT};uv_run (core.c:464);epoll_wait (libc.so.6) 30
{_ROOT};{_GRPC};{_SERVICER};sendmsg (libc.so.6) 20
{_ROOT};{_GRPC};write (libc.so.6) 50
"""


def test_a_profile_is_split_by_the_nearest_owner_of_each_sample() -> None:
    profile = parse_raw(RAW.splitlines())
    assert profile.total == 100
    assert profile.categories["uvloop + libuv (polling, I/O)"] == 30
    assert profile.categories["ours (with what it calls)"] == 20  # its sendmsg is ours
    assert profile.categories["grpc (Cython + C core)"] == 50
    servicer = "InferenceServicer.ModelInfer (service/grpc_frontend/servicer.py)"
    assert profile.ours == {servicer: 20}  # the entry frames (run, run_frontend) own nothing
    text = "\n".join(summary_lines(profile))
    assert "/x/" not in text and "/v/" not in text  # no machine's path in a report
    assert "| `write (libc.so.6)` | 50.0 % |" in text


def test_the_scenario_parses_its_options() -> None:
    args = parse(
        cost_budget.CostBudget, ["--only", "add_sub", "--profile", "3", "--frontends", "2"]
    )
    assert args.only == ["add_sub"] and args.profile == 3.0 and args.frontends == 2
    assert {w.key for w in cost_budget.WORKLOADS} >= {"add_sub", "py_add_sub", "rest_add_sub"}
