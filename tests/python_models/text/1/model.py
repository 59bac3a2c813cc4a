"""UPPER = TEXT upper-cased (BYTES), DOUBLED = DATA * 2: small and large tensors both ways."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            text = pb_utils.get_input_tensor_by_name(request, "TEXT").as_numpy()
            data = pb_utils.get_input_tensor_by_name(request, "DATA").as_numpy()
            upper = np.array([item.upper() for item in text.reshape(-1)], dtype=np.object_)
            responses.append(
                pb_utils.InferenceResponse(
                    [
                        pb_utils.Tensor("UPPER", upper.reshape(text.shape)),
                        pb_utils.Tensor("DOUBLED", data * 2),
                    ]
                )
            )
        return responses
