"""Decoupled: streams TEXT back one token per response, then the final flag."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            text = pb_utils.get_input_tensor_by_name(request, "TEXT").as_numpy().reshape(-1)[0]
            if isinstance(text, bytes):
                text = text.decode("utf-8")
            for token in str(text).split():
                if sender.is_cancelled():
                    break
                out = pb_utils.Tensor("TOKEN", np.array([token.encode("utf-8")], dtype=np.object_))
                sender.send(pb_utils.InferenceResponse([out]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
