"""backend "python": model.py files in worker processes, opened through the backend.

Each instance is a real worker process; models live in tests/python_models.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from python_models.harness import (
    Collector,
    load_config,
    open_one,
    pid_alive,
    request,
    run,
    wait_gone,
    write_model,
)

from inference import model_config_pb2 as mc
from service.backends.base import RequestInstance
from service.repository.completion import check_against_signature, complete


@pytest.fixture
def add_sub() -> Iterator[Any]:
    instance = open_one(load_config("add_sub"))
    yield instance
    instance.close()


def test_a_triton_example_model_runs_unchanged_on_a_list_of_requests(add_sub: Any) -> None:
    assert isinstance(add_sub, RequestInstance)
    a = np.arange(8, dtype=np.float32).reshape(2, 4)
    b = np.ones((2, 4), dtype=np.float32)
    first, second, third = run(
        add_sub,
        request(INPUT0=a, INPUT1=b),
        request(INPUT0=a[:1], INPUT1=b[:1] * 3),
        request(["OUTPUT1"], INPUT0=a[1:], INPUT1=b[1:]),
    )
    assert np.array_equal(first.only.outputs["OUTPUT0"], a + b)
    assert np.array_equal(first.only.outputs["OUTPUT1"], a - b)
    assert np.array_equal(second.only.outputs["OUTPUT0"], a[:1] + 3)
    assert list(third.only.outputs) == ["OUTPUT1"]  # only what the request asked for
    assert third.only.outputs["OUTPUT1"].dtype == np.float32


def test_signature_reports_the_config_so_the_loader_accepts_it(add_sub: Any) -> None:
    config = load_config("add_sub")
    signature = add_sub.signature()
    assert [(t.name, t.datatype, t.shape) for t in signature.inputs] == [
        ("INPUT0", "FP32", (-1, 4)),
        ("INPUT1", "FP32", (-1, 4)),
    ]
    complete(config, signature)
    check_against_signature(config, signature)


def test_exception_in_execute_fails_that_execution_only() -> None:
    instance = open_one(load_config("faulty"))
    try:
        ok, raising = run(instance, request(MODE=[[0]]), request(MODE=[[1]]))
        for sender in (ok, raising):  # one execute: every request of it fails
            assert sender.only.error is not None
            assert "ValueError: MODE 1 asks execute to raise" in sender.only.error
            assert "Failed to process the request(s) for model 'faulty_0_0', message: " in (
                sender.only.error
            )
            assert "model.py" in sender.only.error
        (after,) = run(instance, request(MODE=[[0]]))
        assert after.only.error is None
        assert int(after.only.outputs["PID"][0, 0]) == instance.worker_pid  # same worker
        good, refused = run(instance, request(MODE=[[0]]), request(MODE=[[2]]))
        assert good.only.error is None
        assert refused.only.error == "MODE 2 is refused"
    finally:
        instance.close()


def test_bytes_and_large_tensors_round_trip_through_shared_memory() -> None:
    instance = open_one(load_config("text"))
    try:
        for size in (3, 30_000):  # inline in the message / in a shared region
            text = np.array([f"item {i}".encode() for i in range(size)], dtype=np.object_)
            data = np.arange(size, dtype=np.float32)
            for _ in range(3):  # regions are reused from the second execution on
                (sender,) = run(instance, request(TEXT=text, DATA=data))
                outputs = sender.only.outputs
                assert outputs["UPPER"][-1] == f"ITEM {size - 1}".encode()
                assert outputs["UPPER"].shape == (size,)
                assert np.array_equal(outputs["DOUBLED"], data * 2)
    finally:
        instance.close()


def test_request_fields_and_initialize_args_reach_the_model(tmp_path: Path) -> None:
    marker = tmp_path / "finalized"
    config = load_config("lifecycle", finalize_marker=str(marker))
    instance = open_one(config)
    pid = instance.worker_pid
    req = request(["INFO"], IN=np.array([b"hello"], dtype=np.object_))
    req.request_id, req.correlation_id = "req-7", 42
    req.sequence_start, req.parameters = True, {"temperature": 0.5, "greedy": True}
    (sender,) = run(instance, req)
    info = json.loads(sender.only.outputs["INFO"][0])
    assert info["args"] == {
        "model_instance_kind": "CPU",
        "model_instance_name": "lifecycle_0_0",
        "model_instance_device_id": "0",
        "model_repository": str(Path(__file__).parents[1] / "python_models" / "lifecycle"),
        "model_version": "1",
        "model_name": "lifecycle",
    }
    assert info["config_name"] == "lifecycle"
    assert (info["request_id"], info["correlation_id"], info["flags"]) == ("req-7", 42, 1)
    assert info["parameters"] == {"temperature": 0.5, "greedy": True}
    assert (info["requested"], info["input"]) == (["INFO"], ["hello"])
    assert info["pid"] == pid != 0
    instance.close()
    assert marker.read_text().split() == [str(pid)]  # finalize ran in that worker
    assert wait_gone(pid), "the worker outlived close()"
    instance.close()  # idempotent


def test_auto_complete_config_fills_the_config_before_initialize() -> None:
    config = load_config("auto_complete")
    assert not config.input
    instance = open_one(config)
    try:
        assert config.max_batch_size == 4
        assert [(t.name, mc.DataType.Name(t.data_type), list(t.dims)) for t in config.input] == [
            ("X", "TYPE_FP32", [2])
        ]
        assert [t.name for t in config.output] == ["Y"]
        assert config.HasField("dynamic_batching")
        assert not config.model_transaction_policy.decoupled
        signature = instance.signature()
        complete(config, signature)
        check_against_signature(config, signature)
        (sender,) = run(instance, request(X=np.ones((3, 2), np.float32)))
        assert np.array_equal(sender.only.outputs["Y"], np.full((3, 2), 10, np.float32))
    finally:
        instance.close()


def test_auto_complete_that_contradicts_the_config_fails_the_load() -> None:
    config = load_config("auto_complete", 'input [{ name: "X" data_type: TYPE_INT8 dims: [2] }]')
    with pytest.raises(ValueError, match=r"model 'auto_complete'.*datatype TYPE_INT8"):
        open_one(config)


def test_load_failures_read_as_tritons(tmp_path: Path) -> None:
    version = tmp_path / "broken" / "1"
    version.mkdir(parents=True)
    config = mc.ModelConfig(name="broken", backend="python", default_model_filename="model.py")
    with pytest.raises(ValueError, match=r"model file 'model\.py' not found"):
        open_one(config, version)
    (version / "model.py").write_text("class Other:\n    pass\n")
    # Triton's texts: the stub's error as INTERNAL's status text
    with pytest.raises(
        ValueError,
        match=r"^Internal: AttributeError: module '1\.model' has no attribute 'TritonPythonModel'$",
    ):
        open_one(config, version)
    (version / "model.py").write_text(
        "class TritonPythonModel:\n"
        "    def initialize(self, args):\n"
        "        raise RuntimeError('no weights')\n"
        "    def execute(self, requests):\n"
        "        return []\n"
    )
    with pytest.raises(
        ValueError,
        match=r"^Internal: RuntimeError: no weights\n\nAt:\n  .*model\.py\(3\): initialize\n$",
    ):
        open_one(config, version)


def test_close_leaves_no_worker_behind() -> None:
    instance = open_one(load_config("add_sub"))
    pid = instance.worker_pid
    assert pid_alive(pid)
    instance.close()
    assert wait_gone(pid)
    (sender,) = run(instance, request(INPUT0=np.zeros((1, 4), np.float32)))
    assert "closed" in (sender.only.error or "")


def test_a_worker_exits_when_the_server_process_dies(tmp_path: Path) -> None:
    """The worker watches its socket and its parent: a killed server leaves no orphan."""
    script = (
        "import sys, time\n"
        "from python_models.harness import load_config, open_one\n"
        "instance = open_one(load_config('add_sub'))\n"
        "print(instance.worker_pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    tests_dir = Path(__file__).parents[1]
    with subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, cwd=tests_dir
    ) as server:
        try:
            assert server.stdout is not None
            pid = int(server.stdout.readline())
            assert pid_alive(pid)
        finally:
            server.kill()
    assert wait_gone(pid), "the worker outlived its server"


def test_collector_refuses_responses_after_final() -> None:
    sender = Collector()
    sender.send(final=True)
    with pytest.raises(AssertionError):
        sender.send({})


ECHO_CONFIG = """
max_batch_size: 0
input [{ name: "X" data_type: TYPE_INT32 dims: [1] }]
output [{ name: "Y" data_type: TYPE_INT32 dims: [1] }]
"""


def test_async_execute_and_answers_through_the_sender(tmp_path: Path) -> None:
    source = (
        "import asyncio\n"
        "import triton_python_backend_utils as pb_utils\n"
        "class TritonPythonModel:\n"
        "    async def execute(self, requests):\n"
        "        await asyncio.sleep(0.01)\n"
        "        for r in requests:\n"
        "            x = pb_utils.get_input_tensor_by_name(r, 'X').as_numpy()\n"
        "            r.get_response_sender().send(\n"
        "                pb_utils.InferenceResponse([pb_utils.Tensor('Y', x + 1)]),\n"
        "                flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)\n"
        "        return None\n"
    )
    instance = open_one(write_model(tmp_path, "echo", source, ECHO_CONFIG), tmp_path / "echo" / "1")
    try:
        first, second = run(instance, request(X=[1]), request(X=[5]))
        assert first.only.outputs["Y"].tolist() == [2]
        assert second.only.outputs["Y"].tolist() == [6]
    finally:
        instance.close()


def test_a_wrong_number_of_responses_fails_the_requests(tmp_path: Path) -> None:
    source = (
        "import triton_python_backend_utils as pb_utils\n"
        "class TritonPythonModel:\n"
        "    def execute(self, requests):\n"
        "        return [pb_utils.InferenceResponse([])]\n"
    )
    instance = open_one(
        write_model(tmp_path, "short", source, ECHO_CONFIG), tmp_path / "short" / "1"
    )
    try:
        (one,) = run(instance, request(X=[1]))
        assert one.only.error is None and one.only.outputs == {}
        first, second = run(instance, request(X=[1]), request(X=[2]))
        for sender in (first, second):
            assert "InferenceRequest(s) size is:2, and InferenceResponse(s) size is:1" in (
                sender.only.error or ""
            )
    finally:
        instance.close()
