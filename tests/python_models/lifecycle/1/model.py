"""Reports what the model sees (initialize args, request ids, flags, parameters) as JSON,
and on finalize appends its pid to the file named by the config parameter
'finalize_marker', so a test can tell finalize ran."""

import json
import os

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.args = dict(args)
        self.config = json.loads(args["model_config"])

    def execute(self, requests):
        responses = []
        for request in requests:
            info = {
                "args": {k: v for k, v in self.args.items() if k != "model_config"},
                "config_name": self.config["name"],
                "request_id": request.request_id(),
                "correlation_id": request.correlation_id(),
                "flags": request.flags(),
                "parameters": json.loads(request.parameters()),
                "requested": request.requested_output_names(),
                "input": [x.decode() for x in request.inputs()[0].as_numpy().reshape(-1)],
                "pid": os.getpid(),
            }
            out = pb_utils.Tensor("INFO", np.array([json.dumps(info)], dtype=np.object_))
            responses.append(pb_utils.InferenceResponse([out]))
        return responses

    def finalize(self):
        marker = self.config.get("parameters", {}).get("finalize_marker", {}).get("string_value")
        if marker:
            with open(marker, "a") as handle:
                handle.write(f"{os.getpid()}\n")
