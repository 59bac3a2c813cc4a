"""Sleeps DELAY_MS per request and reports when it ran (wall clock) and in which process."""

import os
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            delay = int(pb_utils.get_input_tensor_by_name(request, "DELAY_MS").as_numpy()[0])
            start = time.time()
            time.sleep(delay / 1000.0)
            end = time.time()
            responses.append(
                pb_utils.InferenceResponse(
                    [
                        pb_utils.Tensor("START", np.array([start])),
                        pb_utils.Tensor("END", np.array([end])),
                        pb_utils.Tensor("PID", np.array([os.getpid()], dtype=np.int64)),
                    ]
                )
            )
        return responses
