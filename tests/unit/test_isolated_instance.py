"""IsolatedInstance: an ONNX Runtime instance in a worker process, against the same
instance opened in this process (same outputs, same errors), and the worker's death."""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import models
import numpy as np
import pytest
from onnx import TensorProto
from proc_info import cmdline, stat_fields
from python_models.harness import wait_gone
from test_onnxruntime_backend import SPEC, bf16_cast_model, make_config

from inference import model_config_pb2 as mc
from service.backends.isolated import IsolatedBackend, IsolatedInstance
from service.backends.onnxruntime import OnnxRuntimeBackend
from service.errors import Internal, InvalidArgument, Unavailable
from wire.datatypes import bf16_bits


def _open(tmp_path: Path, model: object, config: mc.ModelConfig | None = None) -> IsolatedInstance:
    config = config or make_config()
    models.write_model(tmp_path, config.name, model, None)  # type: ignore[arg-type]
    backend = IsolatedBackend(OnnxRuntimeBackend())
    return backend.open(config, tmp_path / config.name / "1", SPEC)


@pytest.fixture
def add_sub(tmp_path: Path) -> Iterator[IsolatedInstance]:
    instance = _open(tmp_path, models.add_sub_model())
    yield instance
    instance.close()


def _cpu_ticks(pid: int) -> int:
    """User + system CPU time of ``pid`` in clock ticks (/proc/PID/stat)."""
    fields = stat_fields(f"/proc/{pid}/stat")
    assert fields is not None, f"process {pid} is gone"
    return int(fields[11]) + int(fields[12])


def _kill_worker(instance: IsolatedInstance) -> int:
    """SIGKILL the worker and wait until the instance has seen it end."""
    pid = instance.worker_pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while instance.worker_alive:
        assert time.monotonic() < deadline, f"the end of worker {pid} was not seen"
        time.sleep(0.01)
    return pid


def test_the_model_runs_in_another_process_with_the_same_results(
    add_sub: IsolatedInstance, tmp_path: Path
) -> None:
    pid = add_sub.worker_pid
    assert pid is not None and pid != os.getpid()
    assert "service.backends.isolated.host" in cmdline(pid)
    in_process = OnnxRuntimeBackend().open(make_config(), tmp_path / "m" / "1", SPEC)
    assert add_sub.signature() == in_process.signature()
    for shape in [(1, 4), (8, 16), (64, 4096)]:  # inline and through the shared region
        a = np.random.default_rng(0).random(shape, dtype=np.float32)
        b = np.full(shape, 2.0, np.float32)
        got = add_sub.execute({"INPUT0": a, "INPUT1": b}, ["OUTPUT1", "OUTPUT0"])
        want = in_process.execute({"INPUT0": a, "INPUT1": b}, ["OUTPUT1", "OUTPUT0"])
        assert list(got) == ["OUTPUT1", "OUTPUT0"]
        for name in got:
            np.testing.assert_array_equal(got[name], want[name])
    in_process.close()


def test_strings_and_bf16_cross_exactly(tmp_path: Path) -> None:
    strings = _open(tmp_path / "s", models.string_add_sub_model())
    a = np.array([[str(i).encode() for i in range(16)]], dtype=np.object_)
    out = strings.execute({"INPUT0": a, "INPUT1": a}, ["OUTPUT0"])["OUTPUT0"]
    assert [int(x) for x in out.ravel()] == [2 * i for i in range(16)]
    strings.close()
    bf16 = _open(tmp_path / "b", bf16_cast_model())
    x = bf16_bits(np.array([1.5, -2.0, 3.25], np.float32))
    got = bf16.execute({"X": x, "F": np.array([1.5, -2.0, 3.25], np.float32)}, ["XF", "FB"])
    np.testing.assert_array_equal(got["XF"], [1.5, -2.0, 3.25])
    np.testing.assert_array_equal(got["FB"], x)
    bf16.close()


def test_errors_keep_their_class_and_text(add_sub: IsolatedInstance, tmp_path: Path) -> None:
    with pytest.raises(Internal, match=r"onnx runtime error: .*INPUT1"):
        add_sub.execute({"INPUT0": np.ones((1, 4), np.float32)}, ["OUTPUT0"])
    strings = _open(tmp_path / "s", models.string_add_sub_model())
    bad = np.array([[b"\xff"] * 16], dtype=np.object_)
    with pytest.raises(InvalidArgument, match="not valid UTF-8"):
        strings.execute({"INPUT0": bad, "INPUT1": bad}, ["OUTPUT0"])
    strings.close()
    # The instance still serves after both.
    out = add_sub.execute(
        {"INPUT0": np.ones((1, 2), np.float32)} | {"INPUT1": np.ones((1, 2), np.float32)},
        ["OUTPUT0"],
    )
    np.testing.assert_array_equal(out["OUTPUT0"], [[2.0, 2.0]])


def test_a_model_that_cannot_load_gives_the_backends_reason(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"onnxruntime failed to load .model\.onnx."):
        _open(tmp_path, b"not an onnx model")
    with pytest.raises(ValueError, match=r"model file .model\.onnx. not found in version 1"):
        IsolatedBackend(OnnxRuntimeBackend()).open(make_config(), tmp_path / "none" / "1", SPEC)


def test_the_providers_line_is_logged_by_the_server(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO):
        instance = _open(tmp_path, models.add_sub_model())
    instance.close()
    lines = [r for r in caplog.records if "onnxruntime providers CPUExecutionProvider" in r.message]
    assert len(lines) == 1 and lines[0].process != os.getpid()  # made in the worker


def test_a_worker_killed_between_batches_is_replaced_without_failing_one(
    add_sub: IsolatedInstance,
) -> None:
    first = _kill_worker(add_sub)
    ones = np.ones((1, 4), np.float32)
    out = add_sub.execute({"INPUT0": ones, "INPUT1": ones}, ["OUTPUT0"])
    np.testing.assert_array_equal(out["OUTPUT0"], 2 * ones)
    assert add_sub.restarts == 1 and add_sub.worker_pid not in (None, first)


def test_a_worker_killed_mid_batch_fails_that_batch_only(tmp_path: Path) -> None:
    """A batch of an MLP long enough to kill the worker while it runs: that batch gets
    an error naming the model, the instance and the signal; the next runs on a new worker."""
    width = 2048
    instance = _open(tmp_path, models.mlp_model(width, layers=3))
    x = np.random.default_rng(0).random((2048, width), dtype=np.float32)
    instance.execute({"INPUT0": x[:1]}, ["OUTPUT0"])  # warm
    victim = instance.worker_pid
    assert victim is not None
    errors: list[BaseException] = []

    def run() -> None:
        try:
            instance.execute({"INPUT0": x}, ["OUTPUT0"])
        except BaseException as exc:
            errors.append(exc)

    idle = _cpu_ticks(victim)
    thread = threading.Thread(target=run)
    thread.start()
    deadline = time.monotonic() + 30  # killed once seen running the batch (50 ms of CPU)
    while _cpu_ticks(victim) < idle + 5 and thread.is_alive():
        assert time.monotonic() < deadline, "the worker never ran the batch"
        time.sleep(0.005)
    os.kill(victim, signal.SIGKILL)
    thread.join(60)
    assert len(errors) == 1 and isinstance(errors[0], Internal), errors
    assert str(errors[0]) == (
        "model 'm' instance 'm_0_0': the worker process was killed by signal SIGKILL during "
        "the execution; a new one starts with the next batch"
    )
    out = instance.execute({"INPUT0": x[:2]}, ["OUTPUT0"])["OUTPUT0"]
    np.testing.assert_allclose(out, models.mlp_reference(x[:2], width, 3), rtol=1e-4, atol=1e-4)
    assert instance.restarts == 1
    instance.close()


def test_a_worker_that_cannot_restart_fails_fast_then_retries(tmp_path: Path) -> None:
    instance = _open(tmp_path, models.add_sub_model())
    (tmp_path / "m" / "1" / "model.onnx").write_bytes(b"gone bad")
    _kill_worker(instance)
    ones = np.ones((1, 4), np.float32)
    with pytest.raises(Unavailable, match="model 'm' instance 'm_0_0' is unavailable: "):
        instance.execute({"INPUT0": ones, "INPUT1": ones}, ["OUTPUT0"])
    started = time.monotonic()
    with pytest.raises(Unavailable):  # within the back-off: no new worker is tried
        instance.execute({"INPUT0": ones, "INPUT1": ones}, ["OUTPUT0"])
    assert time.monotonic() - started < 0.5
    models.write_model(tmp_path, "m", models.add_sub_model(), None)
    time.sleep(1.1)
    out = instance.execute({"INPUT0": ones, "INPUT1": ones}, ["OUTPUT0"])
    np.testing.assert_array_equal(out["OUTPUT0"], 2 * ones)
    instance.close()


def test_close_ends_the_worker(add_sub: IsolatedInstance) -> None:
    pid = add_sub.worker_pid
    assert pid is not None
    add_sub.close()
    assert wait_gone(pid)
    assert add_sub.worker_pid is None


def test_the_config_reaches_the_worker(tmp_path: Path) -> None:
    """The config crosses whole: its parameters decide there (here: refuse the instance)."""
    config = make_config("typed", intra_op_thread_count="many")
    with pytest.raises(ValueError, match="parameter 'intra_op_thread_count' must be an integer"):
        _open(tmp_path, models.identity_model(TensorProto.INT8, ["n"]), config)
    config = make_config("typed", intra_op_thread_count="1")
    instance = _open(tmp_path, models.identity_model(TensorProto.INT8, ["n"]), config)
    x = np.array([-3, 0, 7], np.int8)
    np.testing.assert_array_equal(instance.execute({"INPUT0": x}, ["OUTPUT0"])["OUTPUT0"], x)
    instance.close()
