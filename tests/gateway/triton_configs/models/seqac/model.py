import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(c):
        c.add_input({"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [4]})
        c.add_output({"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [4]})
        c.set_max_batch_size(2)
        return c

    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(
                [
                    pb_utils.Tensor(
                        "OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy()
                    )
                ]
            )
            for r in requests
        ]
