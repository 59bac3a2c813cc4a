"""Loads 'ctl_target' from initialize (Triton allows model control there, unlike BLS)."""

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        pb_utils.load_model("ctl_target")
        if not pb_utils.is_model_ready("ctl_target"):
            raise RuntimeError("ctl_target is not ready after load_model")

    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy())]
            )
            for r in requests
        ]
