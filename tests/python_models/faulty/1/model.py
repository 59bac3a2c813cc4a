"""Misbehaves on demand, per request: MODE 0 answers its worker's pid, 1 raises in
execute, 2 answers an error response (only that request fails), 3 calls os._exit,
4 segfaults (SIGSEGV), 5 hangs for ever."""

import os
import signal
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        modes = [
            int(pb_utils.get_input_tensor_by_name(r, "MODE").as_numpy().reshape(-1)[0])
            for r in requests
        ]
        if 1 in modes:
            raise ValueError("MODE 1 asks execute to raise")
        if 3 in modes:
            os._exit(3)
        if 4 in modes:
            os.kill(os.getpid(), signal.SIGSEGV)
        if 5 in modes:
            time.sleep(3600)
        responses = []
        for mode in modes:
            if mode == 2:
                responses.append(
                    pb_utils.InferenceResponse(error=pb_utils.TritonError("MODE 2 is refused"))
                )
            else:
                pid = pb_utils.Tensor("PID", np.array([[os.getpid()]], dtype=np.int64))
                responses.append(pb_utils.InferenceResponse([pid]))
        return responses
