import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            out.append(
                pb_utils.InferenceResponse(
                    [
                        pb_utils.Tensor("PARAMS", np.array([r.parameters().encode()], np.object_)),
                        pb_utils.Tensor("TIMEOUT", np.array([r.timeout()], np.uint64)),
                        pb_utils.Tensor(
                            "CORR", np.array([str(r.correlation_id()).encode()], np.object_)
                        ),
                        pb_utils.Tensor("FLAGS", np.array([r.flags()], np.uint32)),
                        pb_utils.Tensor("RID", np.array([r.request_id().encode()], np.object_)),
                    ]
                )
            )
        return out
