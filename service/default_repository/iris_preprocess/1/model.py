"""Python preprocessing: millimetres to centimetres, negative readings clipped to zero."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            mm = pb_utils.get_input_tensor_by_name(request, "MEASUREMENTS_MM").as_numpy()
            cm = np.clip(mm, 0.0, None).astype(np.float32) / 10.0
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("FEATURES_CM", cm)]))
        return responses
