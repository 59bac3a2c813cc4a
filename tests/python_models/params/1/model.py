"""Echoes INPUT0 and returns ``request.parameters()`` as sent to the model (a string), and
``request.timeout()``."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            value = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            params = np.array([request.parameters().encode("utf-8")], dtype=np.object_)
            responses.append(
                pb_utils.InferenceResponse(
                    [
                        pb_utils.Tensor("OUTPUT0", value),
                        pb_utils.Tensor("PARAMS", params),
                        pb_utils.Tensor("TIMEOUT", np.array([request.timeout()], np.uint64)),
                    ]
                )
            )
        return responses
