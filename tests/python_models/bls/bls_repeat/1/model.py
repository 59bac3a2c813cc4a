import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for r in requests:
            n = int(pb_utils.get_input_tensor_by_name(r, "IN").as_numpy()[0])
            s = r.get_response_sender()
            for i in range(n):
                s.send(
                    pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([i], np.int32))])
                )
            s.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
