"""qa/L0_libtorch_shared_weights/test.sh's steps as unittest tests, for the qa runner.

Each of test.sh's three server runs (16 instances of libtorch_nobatch_zero_1_float32) runs
``libtorch_shared_weights_test.py SharedWeightsTest.test_pytorch_identity_model`` and then
counts "Reusing TorchScript model for instance" in the server log: 0 without
ENABLE_WEIGHT_SHARING, 15 with it (one load, fifteen instances reusing it). The suite
names the count in ``EXPECTED_REUSE``; the runner passes the log's path in ``SERVER_LOG``.
"""

import os
import subprocess
import sys
import unittest

REUSE_MSG = "Reusing TorchScript model for instance"


class SharedWeightsSteps(unittest.TestCase):
    def test_identity_model(self):
        done = subprocess.run(
            [
                sys.executable,
                "libtorch_shared_weights_test.py",
                "SharedWeightsTest.test_pytorch_identity_model",
            ],
            capture_output=True,
            text=True,
            timeout=240,
        )
        self.assertEqual(done.returncode, 0, done.stdout[-3000:] + done.stderr[-3000:])

    def test_reuse_messages(self):
        with open(os.environ["SERVER_LOG"], errors="replace") as f:
            count = f.read().count(REUSE_MSG)
        self.assertEqual(count, int(os.environ["EXPECTED_REUSE"]))


if __name__ == "__main__":
    unittest.main()
