"""ONNX Runtime instances in worker processes (the split layout), through tritonclient.

Each instance is a child process of the engine; a worker killed under load fails only the
requests its batch held, each with an error naming the model, the instance and the
signal; the model stays ready and the next batches run on a new worker. ``--frontends 0``
keeps instances in threads of its one process. Opt-in for now (``SERVICE_INSTANCE_WORKERS=1``,
decision 030).
"""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from pathlib import Path

import models
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from integration_support import running_server, wait_for_log
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


def _workers(server: ServerProcess) -> dict[str, int]:
    """Instance name -> pid of the process that opened it (from its providers line)."""
    found = re.findall(r"^I\S+ \S+ (\d+) \S+\] model 'mlp' instance '(\S+)'", server.log, re.M)
    return {name: int(pid) for pid, name in found}


def _cmdline(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()


def _engine(server: ServerProcess) -> int:
    found = re.search(r"engine started \(pid (\d+)\)", server.log)
    assert found is not None, server.log
    return int(found.group(1))


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


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
            assert HOST in _cmdline(pid) and _parent(pid) == engine
        x = np.random.default_rng(0).random((3, WIDTH), dtype=np.float32)
        with grpcclient.InferenceServerClient(server.url) as client:
            np.testing.assert_allclose(
                _infer(client, x), models.mlp_reference(x, WIDTH, 3), rtol=1e-4, atol=1e-4
            )
            stats = client.get_inference_statistics("mlp", as_json=True)["model_stats"][0]
            assert int(stats["inference_stats"]["success"]["count"]) == 1
    with running_server([tmp_path], extra_args=["--frontends", "0"], env=WORKERS) as server:
        assert set(_workers(server).values()) == {server.pid}, server.log


@pytest.mark.skipif(os.environ.get("SERVICE_FRONTENDS", "0") != "0", reason="sets its own layout")
def test_a_worker_killed_under_load_fails_only_its_batch(tmp_path: Path) -> None:
    with running_server(
        [_repository(tmp_path)], extra_args=["--frontends", "2"], env=WORKERS
    ) as server:
        victim = _workers(server)["mlp_0_0"]
        x = np.random.default_rng(1).random((ROWS, WIDTH), dtype=np.float32)
        want = models.mlp_reference(x, WIDTH, 3)
        stop = threading.Event()
        failures: list[str] = []
        served = [0] * 4

        def sender(slot: int) -> None:
            with grpcclient.InferenceServerClient(server.url) as client:
                while not stop.is_set():
                    try:
                        np.testing.assert_allclose(_infer(client, x), want, rtol=1e-4, atol=1e-4)
                        served[slot] += 1
                    except InferenceServerException as exc:
                        failures.append(str(exc.message()))

        threads = [threading.Thread(target=sender, args=(i,)) for i in range(4)]
        for thread in threads:
            thread.start()
        try:
            time.sleep(1.0)
            os.kill(victim, signal.SIGKILL)
            wait_for_log(server, "worker restarted", timeout=30)
            before = sum(served)
            time.sleep(1.0)
            assert sum(served) > before  # served on, the new worker among the instances
        finally:
            stop.set()
            for thread in threads:
                thread.join(30)
        assert 1 <= len(failures) <= 4, failures  # one batch's requests at most
        for text in failures:
            assert text == (
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
