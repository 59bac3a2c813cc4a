"""Fails its first two initializations (counted in a file beside the model)."""

from pathlib import Path

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        path = Path(args["model_repository"]) / "attempts"
        count = int(path.read_text()) if path.exists() else 0
        path.write_text(str(count + 1))
        if count < 2:
            raise RuntimeError(f"attempt {count + 1} fails")

    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy())]
            )
            for r in requests
        ]
