"""Model control probe: CASE selects pb_utils.load_model / unload_model / is_model_ready
calls; TEXT answers, as JSON, what each returned or raised (tests/integration/
test_python_model_control.py holds the expected answers)."""

import json
import time

import numpy as np
import triton_python_backend_utils as pb_utils

TARGET = "ctl_target"
NEW_MODEL = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy())]
            )
            for r in requests
        ]
"""
NEW_CONFIG = json.dumps(
    {
        "backend": "python",
        "input": [{"name": "IN", "data_type": "TYPE_FP32", "dims": [1]}],
        "output": [{"name": "OUT", "data_type": "TYPE_FP32", "dims": [1]}],
    }
)


def attempt(call, *args, **kwargs):
    try:
        return ["ok", call(*args, **kwargs)]
    except Exception as exc:
        return [type(exc).__name__, str(exc)]


def wait_unready(name):
    for _ in range(200):
        if not pb_utils.is_model_ready(name):
            return True
        time.sleep(0.05)
    return False


def run(case):
    ready = pb_utils.is_model_ready
    if case == 1:
        before = ready(TARGET)
        pb_utils.load_model(TARGET)
        return [before, ready(TARGET), ready(TARGET, "1"), ready(TARGET, "2"), ready(TARGET, "7")]
    if case == 2:
        pb_utils.unload_model(TARGET)
        return [wait_unready(TARGET)]
    if case == 3:
        return attempt(pb_utils.load_model, "ctl_nope")
    if case == 4:
        config = '{"backend":"python", "version_policy":{"specific":{"versions":[1]}}}'
        pb_utils.load_model(TARGET, config=config)
        return [ready(TARGET, "1"), ready(TARGET, "2"), ready(TARGET)]
    if case == 5:
        return attempt(pb_utils.load_model, TARGET, config="not json")
    if case == 6:
        return [attempt(ready, TARGET, "abc"), attempt(ready, TARGET, "-1"), ready("ctl_nope")]
    if case == 7:
        return attempt(pb_utils.load_model, TARGET, "", {"file:1/model.py": NEW_MODEL.encode()})
    if case == 8:
        files = {"file:1/model.py": NEW_MODEL.encode()}
        pb_utils.load_model("ctl_new", config=NEW_CONFIG, files=files)
        return [ready("ctl_new"), ready("ctl_new", "1"), ready("ctl_new", "2")]
    if case == 9:
        return attempt(pb_utils.load_model, TARGET, NEW_CONFIG, ["x"])
    if case == 10:
        return attempt(pb_utils.unload_model, "ctl_nope")
    if case == 11:
        pb_utils.unload_model("ctl_new")
        pb_utils.unload_model(TARGET)
        return [wait_unready("ctl_new"), wait_unready(TARGET)]
    return "?"


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            case = int(pb_utils.get_input_tensor_by_name(r, "CASE").as_numpy()[0])
            text = np.array([json.dumps(run(case)).encode()], np.object_)
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("TEXT", text)]))
        return out
