"""Decoupled: COUNT responses OUT = 0, 1, ..., one every DELAY_MS, then the final flag.

By default a thread streams them after execute returned; the request parameter
{"inline": true} streams them from execute itself. When the request is cancelled the model
stops and sends a last response OUT = -1 with the final flag, so a test can tell the model
itself saw the cancellation.
"""

import json
import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        if not pb_utils.using_decoupled_model_transaction_policy(config):
            raise pb_utils.TritonModelException("stream needs a decoupled transaction policy")
        self.threads = []

    def execute(self, requests):
        for request in requests:
            count = int(pb_utils.get_input_tensor_by_name(request, "COUNT").as_numpy()[0])
            delay = int(pb_utils.get_input_tensor_by_name(request, "DELAY_MS").as_numpy()[0])
            sender = request.get_response_sender()
            if json.loads(request.parameters()).get("inline"):
                self.stream(sender, count, delay)
            else:
                thread = threading.Thread(target=self.stream, args=(sender, count, delay))
                thread.start()
                self.threads.append(thread)
        return None

    def stream(self, sender, count, delay):
        for index in range(count):
            time.sleep(delay / 1000.0)
            if sender.is_cancelled():
                cancelled = pb_utils.Tensor("OUT", np.array([-1], dtype=np.int32))
                sender.send(
                    pb_utils.InferenceResponse([cancelled]),
                    flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
                )
                return
            out = pb_utils.Tensor("OUT", np.array([index], dtype=np.int32))
            sender.send(pb_utils.InferenceResponse(output_tensors=[out]))
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    def finalize(self):
        for thread in self.threads:
            thread.join()
