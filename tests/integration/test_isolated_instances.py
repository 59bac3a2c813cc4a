"""ONNX Runtime instances in worker processes (the split layout), through tritonclient.

Each instance is a child process of the engine; a worker killed under load fails only the
requests its batch held, each with an error naming the model, the instance and the
signal; the model stays ready and the next batches run on a new worker. ``--frontends 0``
keeps instances in threads of its one process. Opt-in for now (``SERVICE_INSTANCE_WORKERS=1``,
decision 030).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import models
import numpy as np
import onnx
import pytest
import tritonclient.grpc as grpcclient
from integration_support import running_server
from onnx import TensorProto, helper
from proc_info import cmdline, process_tree, rss_mb
from server_process import ServerProcess
from tritonclient.utils import InferenceServerException

WIDTH, ROWS = 1024, 256  # an execution of some tens of milliseconds on two cores
HOST = "service.backends.isolated.host"
WORKERS = {"SERVICE_INSTANCE_WORKERS": "1"}  # opt-in: decision 030


def _repository(root: Path) -> Path:
    models.write_model(
        root,
        "mlp",
        models.mlp_model(WIDTH, layers=3),
        models.make_config(
            "mlp",
            [("INPUT0", "FP32", [WIDTH])],
            [("OUTPUT0", "FP32", [WIDTH])],
            max_batch_size=ROWS,
            instance_count=2,
        ),
    )
    return root


def _workers_of(server: ServerProcess, model: str) -> dict[str, int]:
    """Instance name -> pid of the process that opened it (from its providers line)."""
    pattern = rf"^I\S+ \S+ (\d+) \S+\] model '{model}' instance '(\S+)'"
    return {name: int(pid) for pid, name in re.findall(pattern, server.log, re.M)}


def _workers(server: ServerProcess) -> dict[str, int]:
    return _workers_of(server, "mlp")


def _engine(server: ServerProcess) -> int:
    found = re.search(r"engine started \(pid (\d+)\)", server.log)
    assert found is not None, server.log
    return int(found.group(1))


def _parent(pid: int) -> int:
    return process_tree(pid)[pid]


@contextlib.contextmanager
def _under_load(
    server: ServerProcess, x: np.ndarray, clients: int = 4
) -> Iterator[tuple[list[int], list[BaseException]]]:
    """``clients`` threads infer ``x`` on the MLP back to back (each answer checked) while
    the block runs: (answers per client, what failed)."""
    want = models.mlp_reference(x, WIDTH, 3)
    stop = threading.Event()
    served = [0] * clients
    failures: list[BaseException] = []

    def sender(slot: int) -> None:
        with grpcclient.InferenceServerClient(server.url) as client:
            while not stop.is_set():
                try:
                    np.testing.assert_allclose(_infer(client, x), want, rtol=1e-4, atol=1e-4)
                    served[slot] += 1
                except BaseException as exc:  # every failure is reported, not lost
                    failures.append(exc)

    threads = [threading.Thread(target=sender, args=(i,)) for i in range(clients)]
    for thread in threads:
        thread.start()
    try:
        yield served, failures
    finally:
        stop.set()
        for thread in threads:
            thread.join(30)


def _infer(client: grpcclient.InferenceServerClient, x: np.ndarray) -> np.ndarray:
    tensor = grpcclient.InferInput("INPUT0", list(x.shape), "FP32")
    tensor.set_data_from_numpy(x)
    out = client.infer("mlp", [tensor]).as_numpy("OUTPUT0")
    assert out is not None
    return out


@pytest.mark.skipif(os.environ.get("SERVICE_FRONTENDS", "0") != "0", reason="sets its own layouts")
def test_each_instance_is_a_worker_process_of_the_engine(tmp_path: Path) -> None:
    with running_server(
        [_repository(tmp_path)], extra_args=["--frontends", "2"], env=WORKERS
    ) as server:
        workers = _workers(server)
        assert sorted(workers) == ["mlp_0_0", "mlp_0_1"], server.log
        engine = _engine(server)
        for pid in workers.values():
            assert HOST in cmdline(pid) and _parent(pid) == engine
        x = np.random.default_rng(0).random((3, WIDTH), dtype=np.float32)
        with grpcclient.InferenceServerClient(server.url) as client:
            np.testing.assert_allclose(
                _infer(client, x), models.mlp_reference(x, WIDTH, 3), rtol=1e-4, atol=1e-4
            )
            stats = client.get_inference_statistics("mlp", as_json=True)["model_stats"][0]
            assert int(stats["inference_stats"]["success"]["count"]) == 1
    with running_server([tmp_path], extra_args=["--frontends", "0"], env=WORKERS) as server:
        assert set(_workers(server).values()) == {server.pid}, server.log


def _cpu_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def _kill_while_executing(pid: int) -> None:
    """SIGKILL ``pid`` as soon as it is seen spending CPU (running a batch: an idle
    worker waits in a read), or after 10 s of looking."""
    deadline = time.monotonic() + 10
    ticks = _cpu_ticks(pid)
    while time.monotonic() < deadline:
        time.sleep(0.005)
        now = _cpu_ticks(pid)
        if now > ticks:
            break
        ticks = now
    os.kill(pid, signal.SIGKILL)


def _answered_again(served: list[int], timeout: float = 60) -> None:
    """Until every client has had an answer since now: a client whose request the kill
    failed has recorded that failure before it sent another."""
    since = list(served)
    deadline = time.monotonic() + timeout
    while any(now <= then for now, then in zip(served, since, strict=True)):
        assert time.monotonic() < deadline, f"clients stalled: {served} since {since}"
        time.sleep(0.01)


@pytest.mark.skipif(os.environ.get("SERVICE_FRONTENDS", "0") != "0", reason="sets its own layout")
def test_a_worker_killed_under_load_fails_only_its_batch(tmp_path: Path) -> None:
    """Killed while it runs a batch, a worker fails that batch's requests and no other.
    A kill that still finds the worker between batches fails nothing (the next batch
    runs on the new worker), so the kill is repeated, a few times at most, until one
    lands in a batch: however busy the machine, what is checked is the failed batch."""
    with running_server(
        [_repository(tmp_path)], extra_args=["--frontends", "2"], env=WORKERS
    ) as server:
        x = np.random.default_rng(1).random((ROWS, WIDTH), dtype=np.float32)
        with _under_load(server, x) as (served, failures):
            _answered_again(served)
            for _ in range(5):
                victim = _workers(server)["mlp_0_0"]
                restarts = server.log.count("worker restarted")
                _kill_while_executing(victim)
                deadline = time.monotonic() + 30
                while server.log.count("worker restarted") <= restarts:
                    assert time.monotonic() < deadline, server.log
                    time.sleep(0.01)
                _answered_again(served)  # served on, and the failed batch reported
                if failures:
                    break
            assert failures, f"5 kills found the worker between batches:\n{server.log}"
        assert 1 <= len(failures) <= 4, failures  # one batch's requests at most
        for failure in failures:
            assert isinstance(failure, InferenceServerException), failure
            assert failure.message() == (
                "model 'mlp' instance 'mlp_0_0': the worker process was killed by signal "
                "SIGKILL during the execution; a new one starts with the next batch"
            )
        assert f"(pid {victim}) was killed by signal SIGKILL" in server.log
        new = _workers(server)["mlp_0_0"]
        assert new != victim and _parent(new) == _engine(server)
        with grpcclient.InferenceServerClient(server.url) as client:
            assert client.is_model_ready("mlp")
            stats = client.get_inference_statistics("mlp", as_json=True)["model_stats"][0]
            assert int(stats["inference_stats"]["fail"]["count"]) == len(failures)


def _gather_model() -> onnx.ModelProto:
    """OUT = TABLE[IDX] over a table of four: an index past it fails inside ONNX Runtime,
    after validation, so the request reaches the worker and fails there."""
    table = helper.make_tensor("TABLE", TensorProto.FLOAT, [4], [1.0, 2.0, 3.0, 4.0])
    graph = helper.make_graph(
        [helper.make_node("Gather", ["TABLE", "IDX"], ["OUT"], axis=0)],
        "gather",
        [helper.make_tensor_value_info("IDX", TensorProto.INT64, ["batch", 1])],
        [helper.make_tensor_value_info("OUT", TensorProto.FLOAT, ["batch", 1])],
        initializer=[table],
    )
    return models.make_model(graph)


def _rss_mb(pid: int) -> float:
    rss = rss_mb(pid)
    assert rss is not None, f"process {pid} is gone"
    return rss


@pytest.mark.skipif(os.environ.get("SERVICE_FRONTENDS", "0") != "0", reason="sets its own layout")
def test_many_failed_executions_leave_no_memory_behind(tmp_path: Path) -> None:
    """10,000 requests that fail inside the worker: each gets ONNX Runtime's error, and
    neither the worker nor the engine grows past a margin (no region, slab block or
    pending call is left behind per failure)."""
    models.write_model(
        tmp_path,
        "gather",
        _gather_model(),
        models.make_config(
            "gather", [("IDX", "INT64", [1])], [("OUT", "FP32", [1])], max_batch_size=8
        ),
    )
    with running_server([tmp_path], extra_args=["--frontends", "2"], env=WORKERS) as server:
        worker = _workers_of(server, "gather")["gather_0_0"]
        engine = _engine(server)
        bad = grpcclient.InferInput("IDX", [1, 1], "INT64")
        bad.set_data_from_numpy(np.array([[100]], dtype=np.int64))

        def fail(count: int) -> None:
            with grpcclient.InferenceServerClient(server.url) as client:
                for _ in range(count):
                    with pytest.raises(InferenceServerException, match="onnx runtime error"):
                        client.infer("gather", [bad])

        def storm(total: int, threads: int = 4) -> None:
            workers = [
                threading.Thread(target=fail, args=(total // threads,)) for _ in range(threads)
            ]
            for thread in workers:
                thread.start()
            for thread in workers:
                thread.join(300)

        storm(1_000)  # warm: pools, caches and the allocator's steady state
        before = {pid: _rss_mb(pid) for pid in (worker, engine)}
        storm(10_000)
        after = {pid: _rss_mb(pid) for pid in (worker, engine)}
        assert all(after[pid] <= before[pid] + 20 for pid in before), (before, after)
        assert _workers_of(server, "gather")["gather_0_0"] == worker  # never restarted
        with grpcclient.InferenceServerClient(server.url) as client:
            good = grpcclient.InferInput("IDX", [1, 1], "INT64")
            good.set_data_from_numpy(np.array([[2]], dtype=np.int64))
            assert client.infer("gather", [good]).as_numpy("OUT").tolist() == [[3.0]]
            stats = client.get_inference_statistics("gather", as_json=True)["model_stats"][0]
            assert int(stats["inference_stats"]["fail"]["count"]) == 11_000


@pytest.mark.skipif(os.environ.get("SERVICE_FRONTENDS", "0") != "0", reason="sets its own layout")
def test_reload_under_load_with_workers_loses_no_request(tmp_path: Path) -> None:
    """4 clients infer while the model is reloaded 3 times with other instance counts: the
    new version's workers start before the old one's stop, and no request fails."""
    args = ["--frontends", "2", "--model-control-mode", "explicit", "--load-model", "mlp"]
    with running_server([_repository(tmp_path)], extra_args=args, env=WORKERS) as server:
        x = np.random.default_rng(2).random((2, WIDTH), dtype=np.float32)
        with (
            _under_load(server, x) as (served, errors),
            grpcclient.InferenceServerClient(server.url) as control,
        ):
            for count in (1, 3, 2):
                time.sleep(0.5)
                config = control.get_model_config("mlp", as_json=True)["config"]
                config["instance_group"] = [{"count": count, "kind": "KIND_CPU"}]
                control.load_model("mlp", config=json.dumps(config))
            time.sleep(0.5)
        assert not errors, f"{len(errors)} failed requests, first: {errors[0]!r}"
        assert all(n > 0 for n in served), served
        engine = _engine(server)
        children = [p for p, parent in process_tree(engine).items() if parent == engine]
        hosts = [p for p in children if HOST in cmdline(p)]
        assert len(hosts) == 2, hosts  # the last version's two workers; the others ended
