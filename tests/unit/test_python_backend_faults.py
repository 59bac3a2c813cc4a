"""Python-model workers that crash or hang are reported, killed and restarted; instances
run in parallel processes; nothing outlives close()."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from python_models.harness import (
    children_of,
    load_config,
    open_instances,
    open_one,
    pid_alive,
    request,
    run,
    wait_gone,
    write_model,
)

from service.backends.python import backend as backend_module


def _pid(sender: Any) -> int:
    assert sender.only.error is None, sender.only.error
    return int(sender.only.outputs["PID"].reshape(-1)[0])


@pytest.mark.parametrize(("mode", "how"), [(3, "exited with code 3"), (4, "SIGSEGV")])
def test_a_crashing_worker_fails_its_requests_and_is_restarted(mode: int, how: str) -> None:
    instance = open_one(load_config("faulty"))
    try:
        (before,) = run(instance, request(MODE=[[0]]))
        old = _pid(before)
        first, second = run(instance, request(MODE=[[0]]), request(MODE=[[mode]]))
        for sender in (first, second):
            error = sender.only.error or ""
            assert "model 'faulty' instance 'faulty_0_0'" in error
            assert how in error and "restarted" in error
        assert wait_gone(old)
        (after,) = run(instance, request(MODE=[[0]]))
        assert _pid(after) not in (old, 0)
        assert instance.restarts == 1
    finally:
        instance.close()


def test_an_execute_past_the_timeout_is_killed_and_the_instance_recovers() -> None:
    instance = open_one(load_config("faulty", execute_timeout_secs="0.5"))
    try:
        (before,) = run(instance, request(MODE=[[0]]))
        old = _pid(before)
        start = time.monotonic()
        (hung,) = run(instance, request(MODE=[[5]]))
        assert 0.5 <= time.monotonic() - start < 5
        error = hung.only.error or ""
        assert "model 'faulty'" in error and "did not return within 0.5 s" in error
        assert wait_gone(old)
        (after,) = run(instance, request(MODE=[[0]]))
        assert _pid(after) != old
    finally:
        instance.close()


def test_an_execute_longer_than_the_receive_tick_is_answered() -> None:
    """The instance's thread waits for the answer in a read bounded by one second (the
    calls socket's receive timeout, to notice a worker gone while a child holds its
    socket): a longer execute times that read out, and the answer read afterwards still
    reaches its request, as does the next one."""
    instance = open_one(load_config("sleepy"))
    try:
        (slow,) = run(instance, request(DELAY_MS=np.array([1500], np.int32)))
        assert slow.only.error is None, slow.only.error
        start, end = float(slow.only.outputs["START"][0]), float(slow.only.outputs["END"][0])
        assert end - start >= 1.5
        (quick,) = run(instance, request(DELAY_MS=np.array([0], np.int32)))
        assert quick.only.error is None, quick.only.error
        assert int(quick.only.outputs["PID"][0]) == int(slow.only.outputs["PID"][0])
        assert instance.restarts == 0
    finally:
        instance.close()


def test_a_crash_while_idle_is_noticed_and_the_next_request_gets_a_new_worker() -> None:
    instance = open_one(load_config("faulty"))
    try:
        old = instance.worker_pid
        os.kill(old, signal.SIGKILL)
        assert wait_gone(old)
        deadline = time.monotonic() + 5
        while instance.available and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not instance.available
        (after,) = run(instance, request(MODE=[[0]]))
        assert _pid(after) != old
        assert instance.available
    finally:
        instance.close()


def test_instances_are_separate_processes_that_run_in_parallel() -> None:
    config = load_config("sleepy")
    config.instance_group[0].count = 3
    instances = open_instances(config)
    try:
        assert len(instances) == 3
        results: list[Any] = [None] * 3

        def call(index: int) -> None:
            (results[index],) = run(instances[index], request(DELAY_MS=np.array([400], np.int32)))

        threads = [threading.Thread(target=call, args=(i,)) for i in range(3)]
        start = time.monotonic()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        elapsed = time.monotonic() - start
        outputs = [r.only.outputs for r in results]
        assert len({int(o["PID"][0]) for o in outputs}) == 3
        # Three 400 ms executions overlapped: together well under the 1.2 s a single
        # instance would need, and each one started before any other ended.
        assert elapsed < 1.0, elapsed
        assert max(float(o["START"][0]) for o in outputs) < min(float(o["END"][0]) for o in outputs)
    finally:
        for instance in instances:
            instance.close()


def test_a_hanging_instance_does_not_hold_up_its_siblings() -> None:
    first, second = open_instances(
        load_config("faulty", "instance_group [{ count: 2 }]", execute_timeout_secs="2")
    )
    try:
        hung: list[Any] = []
        thread = threading.Thread(target=lambda: hung.extend(run(first, request(MODE=[[5]]))))
        thread.start()
        time.sleep(0.2)
        for _ in range(5):
            (ok,) = run(second, request(MODE=[[0]]))
            assert _pid(ok) == second.worker_pid
        assert thread.is_alive()  # still hanging while its sibling served
        thread.join()
        assert "did not return within 2 s" in (hung[0].only.error or "")
    finally:
        first.close()
        second.close()


def test_no_worker_process_survives_close() -> None:
    before = children_of()
    instances = open_instances(load_config("sleepy"))  # instance_group count: 2
    pids = {instance.worker_pid for instance in instances}
    assert pids <= children_of()
    crashed = open_one(load_config("faulty"))
    run(crashed, request(MODE=[[3]]))  # a restart: the first worker must be reaped too
    pids.add(crashed.worker_pid)
    for instance in [*instances, crashed]:
        instance.close()
    for pid in pids:
        assert wait_gone(pid)
    assert children_of() <= before


def test_a_worker_that_cannot_restart_leaves_the_instance_unavailable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(backend_module, "RESTART_BACKOFF", 0.3)
    source = (
        "import os, numpy as np\n"
        "import triton_python_backend_utils as pb_utils\n"
        "class TritonPythonModel:\n"
        "    def initialize(self, args):\n"
        "        if os.path.exists(os.path.join(os.path.dirname(__file__), 'broken')):\n"
        "            raise RuntimeError('weights are gone')\n"
        "    def execute(self, requests):\n"
        "        return [pb_utils.InferenceResponse([]) for r in requests]\n"
    )
    config = write_model(
        tmp_path, "fragile", source, 'input [{ name: "X" data_type: TYPE_INT32 dims: [1] }]'
    )
    instance = open_one(config, tmp_path / "fragile" / "1")
    try:
        (tmp_path / "fragile" / "1" / "broken").touch()
        os.kill(instance.worker_pid, signal.SIGKILL)
        while instance.available:
            time.sleep(0.01)
        for _ in range(2):  # the failed restart is not retried within the back-off
            (failed,) = run(instance, request(X=[1]))
            error = failed.only.error or ""
            assert "model 'fragile' instance 'fragile_0_0' is unavailable" in error
            assert "RuntimeError: weights are gone" in error
        assert not instance.available
        (tmp_path / "fragile" / "1" / "broken").unlink()
        time.sleep(0.35)
        (ok,) = run(instance, request(X=[1]))
        assert ok.only.error is None and instance.available
    finally:
        instance.close()


def test_a_worker_that_dies_while_its_child_holds_the_links_is_noticed(tmp_path: Path) -> None:
    """A model that forked leaves copies of the worker's sockets in the child: the links
    stay open after the worker exits, so no end of stream comes. The bounded reads
    (``Channel.recv_within``, a second at most) look at the process between reads and
    report the exit all the same; the request fails and the next gets a new worker."""
    child_file = tmp_path / "child.pid"
    source = (
        "import os, time\n"
        "import numpy as np\n"
        "import triton_python_backend_utils as pb_utils\n"
        "class TritonPythonModel:\n"
        "    def execute(self, requests):\n"
        "        x = pb_utils.get_input_tensor_by_name(requests[0], 'X').as_numpy()\n"
        "        if int(x[0]) == 1:\n"
        "            child = os.fork()\n"
        "            if child == 0:\n"
        "                time.sleep(120)\n"
        "                os._exit(0)\n"
        f"            with open({str(child_file)!r}, 'w') as f:\n"
        "                f.write(str(child))\n"
        "            os._exit(3)\n"
        "        pid = np.array([os.getpid()], dtype=np.int64)\n"
        "        return [pb_utils.InferenceResponse([pb_utils.Tensor('PID', pid)])]\n"
    )
    config = write_model(
        tmp_path,
        "forker",
        source,
        'input [{ name: "X" data_type: TYPE_INT32 dims: [1] }]\n'
        'output [{ name: "PID" data_type: TYPE_INT64 dims: [1] }]',
    )
    instance = open_one(config, tmp_path / "forker" / "1")
    child = 0
    try:
        old = instance.worker_pid
        (forked,) = run(instance, request(X=np.array([1], np.int32)))
        child = int(child_file.read_text())
        assert pid_alive(child)  # it holds the worker's ends of both links
        error = forked.only.error or ""
        assert "exited with code 3" in error and "restarted" in error, error
        assert wait_gone(old)
        (after,) = run(instance, request(X=np.array([0], np.int32)))
        assert _pid(after) not in (old, child, 0)
    finally:
        if child:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signal.SIGKILL)
        instance.close()
