"""A sequence model that keeps its own running sums per correlation ID (the python backend
has no implicit state) from the control tensors the sequence batcher feeds it.

SUM: the sequence's running sum (INPUT on START). SEEN: [START, END, READY, CORRID,
requests in this execute call]. Not-ready (null) requests change nothing.
"""

import numpy as np
import triton_python_backend_utils as pb_utils


def _tensor(request, name):
    return pb_utils.get_input_tensor_by_name(request, name).as_numpy()


class TritonPythonModel:
    def initialize(self, args):
        self.sums = {}

    def execute(self, requests):
        responses = []
        for request in requests:
            start, end, ready, corrid = (
                _tensor(request, n) for n in ("START", "END", "READY", "CORRID")
            )
            value = int(_tensor(request, "INPUT")[0, 0])
            cid = int(corrid[0, 0])
            if bool(ready[0, 0]):
                base = 0 if int(start[0, 0]) else self.sums.get(cid, 0)
                self.sums[cid] = base + value
                total = self.sums.pop(cid) if float(end[0, 0]) else self.sums[cid]
            else:
                total = 0
            seen = [int(start[0, 0]), int(end[0, 0]), int(ready[0, 0]), cid, len(requests)]
            responses.append(
                pb_utils.InferenceResponse(
                    [
                        pb_utils.Tensor("SUM", np.array([[total]], dtype=np.int32)),
                        pb_utils.Tensor("SEEN", np.array([seen], dtype=np.int32)),
                    ]
                )
            )
        return responses
