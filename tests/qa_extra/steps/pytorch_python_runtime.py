"""qa/L0_pytorch_python_runtime/test.sh's steps as unittest tests, for the qa runner (which
runs unittest files, and this test.sh runs a script and greps a log instead).

The runner starts the server on the suite's repository (test.sh's ``models``) with
``--log-verbose=1`` and runs this file in the qa directory, where the recipe put what
test.sh puts there: ``py_runtime.py`` (the runtime's ``model.py``) and
``neuralnet_test_data.json``. Each test is one step of test.sh, with its verdict:

- test_unit_test: ``python3 unit_test.py`` with torch (test.sh: in the runtime's
  execution environment; here the project's Python, ``OURS_PYTHON`` or
  ``$OURS_PROJECT/.venv/bin/python``) exits 0;
- test_log_messages: every line of test.sh's EXPECTED_LOG_MSGS (read from test.sh, by
  bash) is in the server log;
- test_infer_torchscript: test.sh infers ``resnet50_libtorch`` with image_client.py on
  Triton's image data, which is not in its repository: the stand-in TorchScript model
  (OUTPUT__0 = 2 * INPUT__0 + 1) is inferred and checked instead, batch 2 as there;
- test_infer_pytorch: ``python infer.py`` exits 0.
"""

import os
import re
import subprocess
import sys
import unittest

import numpy as np
import tritonclient.http as httpclient

HERE = os.getcwd()  # the runner's cwd: qa/L0_pytorch_python_runtime


def _torch_python():
    if os.environ.get("OURS_PYTHON"):
        return os.environ["OURS_PYTHON"]
    return os.path.join(os.environ["OURS_PROJECT"], ".venv", "bin", "python")


def _expected_log_messages():
    with open(os.path.join(HERE, "test.sh")) as f:
        text = f.read()
    block = re.search(r"^\s*EXPECTED_LOG_MSGS=\(.*?^\s*\)\s*$", text, re.S | re.M)
    assert block is not None, "no EXPECTED_LOG_MSGS in test.sh"
    script = block.group(0) + '\nprintf "%s\\n" "${EXPECTED_LOG_MSGS[@]}"\n'
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True)
    return [line for line in out.stdout.splitlines() if line]


class PyTorchPythonRuntimeSteps(unittest.TestCase):
    def _run(self, command):
        done = subprocess.run(command, cwd=HERE, capture_output=True, text=True, timeout=600)
        self.assertEqual(done.returncode, 0, done.stdout[-3000:] + done.stderr[-3000:])

    def test_unit_test(self):
        self._run([_torch_python(), "unit_test.py"])

    def test_log_messages(self):
        with open(os.environ["SERVER_LOG"], errors="replace") as f:
            log = f.read()
        expected = _expected_log_messages()
        self.assertEqual(len(expected), 7)
        missing = [message for message in expected if message not in log]
        self.assertEqual(missing, [])

    def test_infer_torchscript(self):
        data = np.array([[0.5, -1.0, 2.0], [3.0, 0.0, -4.5]], dtype=np.float32)
        with httpclient.InferenceServerClient("localhost:8000") as client:
            tensor = httpclient.InferInput("INPUT__0", list(data.shape), "FP32")
            tensor.set_data_from_numpy(data)
            result = client.infer("resnet50_libtorch", [tensor])
        np.testing.assert_allclose(result.as_numpy("OUTPUT__0"), data * 2 + 1)

    def test_infer_pytorch(self):
        self._run([sys.executable, "infer.py"])


if __name__ == "__main__":
    unittest.main()
