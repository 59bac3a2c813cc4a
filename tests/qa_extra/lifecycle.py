"""L0_lifecycle's tests, each on the repository and flags its test.sh gives it.

- The parallel-load tests (issue 27, item 8): two models, and two instances of one model,
  each taking 10 s to load, are ready in less than 15 s.
- lifecycle_model_control_ensemble (issue 39, item 4): an ensemble loaded in explicit mode
  brings its composing model; unloading it with ``unload_dependents`` unloads that model
  too, without it the model stays.
- lifecycle_file_override_security (issue 39, item 5): the server starts on a model whose
  ``version_policy: specific [1, 3]`` names a version with no folder (test.sh removes
  ``1/``): version 3 loads. Sent files may not escape the model's folder.

Repositories as L0_lifecycle/test.sh builds them. Its ``identity_zero_1_int32`` runs on
Triton's C++ ``identity`` test backend with ``creation_delay_sec: 10``, which the
reference Triton here does not have: both servers get the same Python stand-in (identity,
sleeping ``creation_delay_sec`` in ``initialize``), as the runner's other stand-ins do.
"""

from __future__ import annotations

from typing import Any

import manifest
from manifest import Suite

# gen_qa_model_repository: gen_qa_models.py --ensemble (configs only, every platform)
manifest.GENERATORS.setdefault(
    "qa_ensemble_model_repository", ["gen_qa_models.py", "--ensemble", "--models_dir={out}"]
)

_DELAYED_IDENTITY = '''
import json
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """Stand-in for the identity backend with creation_delay_sec."""

    def initialize(self, args):
        parameters = json.loads(args["model_config"]).get("parameters", {})
        delay = parameters.get("creation_delay_sec", {}).get("string_value", "0")
        time.sleep(float(delay))

    def execute(self, requests):
        responses = []
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", data)]))
        return responses
'''

_SLEEP_IN_INITIALIZE = (
    "    def initialize(self, args):\n        import time\n        time.sleep(10)\n"
)


def _python_identity_fp32(r: Any, name: str, with_config: bool = True) -> None:
    """qa/python_models/identity_fp32 with ``time.sleep(10)`` appended as ``initialize``."""
    r.copy(r.qa("python_models/identity_fp32/model.py"), f"{name}/1/model.py")
    r.append(f"{name}/1/model.py", _SLEEP_IN_INITIALIZE)
    if with_config:
        r.copy(r.qa("python_models/identity_fp32/config.pbtxt"), f"{name}/config.pbtxt")
        r.sub(f"{name}/config.pbtxt", r"identity_fp32", name)


def repo_model_load_speedup(r: Any) -> None:
    """test.sh: identity_zero_1_int32_{1,2} and python_identity_fp32_{1,2}."""
    for i in (1, 2):
        name = f"identity_zero_1_int32_{i}"
        r.copy(r.qa("L0_lifecycle/identity_zero_1_int32/config.pbtxt"), f"{name}/config.pbtxt")
        r.sub(f"{name}/config.pbtxt", r"identity_zero_1_int32", name)
        r.sub(f"{name}/config.pbtxt", r"^backend:.*$", 'backend: "python"')
        r.write(f"{name}/1/model.py", _DELAYED_IDENTITY)
        _python_identity_fp32(r, f"python_identity_fp32_{i}")


def repo_instance_load_speedup(r: Any) -> None:
    """test.sh: identity_fp32 without its config.pbtxt (the test loads it with one)."""
    _python_identity_fp32(r, "identity_fp32", with_config=False)


ONNX_FFF = "onnx_float32_float32_float32"


def repo_model_control_ensemble(r: Any) -> None:
    """test.sh: onnx_float32_float32_float32 and simple_onnx_float32_float32_float32, both
    with ``max_batch_size: 1``."""
    ensemble = f"simple_{ONNX_FFF}"
    r.copy(r.gen("qa_model_repository", ONNX_FFF), ONNX_FFF)
    r.copy(r.gen("qa_ensemble_model_repository", ensemble), ensemble)
    for name in (ONNX_FFF, ensemble):
        r.sub(f"{name}/config.pbtxt", r"max_batch_size:.*", "max_batch_size: 1")


def repo_file_override(r: Any) -> None:
    """test.sh: onnx_float32_float32_float32 without its version 1 folder (its config's
    policy names versions 1 and 3)."""
    r.copy(r.gen("qa_model_repository", ONNX_FFF), ONNX_FFF)
    r.remove(f"{ONNX_FFF}/1")


SUITES = [
    Suite(
        "lifecycle_concurrent_model_load_speedup",
        "L0_lifecycle",
        "lifecycle_test.py",
        ["LifeCycleTest::test_concurrent_model_load_speedup"],
        repo_model_load_speedup,
        args=["--model-control-mode=explicit"],
        restart="test",
        timeout=120,
        default=False,
        note="identity backend (creation_delay_sec 10) as a Python stand-in on both servers",
    ),
    Suite(
        "lifecycle_concurrent_instance_load_speedup",
        "L0_lifecycle",
        "lifecycle_test.py",
        ["LifeCycleTest::test_concurrent_model_instance_load_speedup"],
        repo_instance_load_speedup,
        args=["--model-control-mode=explicit"],
        restart="test",
        timeout=120,
        default=False,
    ),
    Suite(
        "lifecycle_model_control_ensemble",
        "L0_lifecycle",
        "lifecycle_test.py",
        ["LifeCycleTest::test_model_control_ensemble"],
        repo_model_control_ensemble,
        args=[
            "--model-control-mode=explicit",
            "--exit-timeout-secs=5",
            "--strict-model-config=false",
            "--strict-readiness=false",
        ],
        default=False,
        reference="pass-ort",
    ),
    Suite(
        "lifecycle_file_override_security",
        "L0_lifecycle",
        "lifecycle_test.py",
        ["LifeCycleTest::test_file_override_security"],
        repo_file_override,
        args=[
            "--model-control-mode=explicit",
            f"--load-model={ONNX_FFF}",
            "--strict-model-config=false",
        ],
        default=False,
        reference="pass-ort",
    ),
]
