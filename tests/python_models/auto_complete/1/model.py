"""Declares its own config through auto_complete_config, as Triton python models may."""

import json

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(auto_complete_model_config):
        auto_complete_model_config.set_max_batch_size(4)
        auto_complete_model_config.add_input({"name": "X", "data_type": "TYPE_FP32", "dims": [2]})
        auto_complete_model_config.add_output({"name": "Y", "data_type": "TYPE_FP32", "dims": [2]})
        auto_complete_model_config.set_dynamic_batching()
        auto_complete_model_config.set_model_transaction_policy({"decoupled": False})
        return auto_complete_model_config

    def initialize(self, args):
        config = json.loads(args["model_config"])
        # Triton passes the completed config to initialize.
        assert [i["name"] for i in config["input"]] == ["X"], config
        assert config["max_batch_size"] == 4, config

    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor("Y", pb_utils.get_input_tensor_by_name(r, "X").as_numpy() * 10)]
            )
            for r in requests
        ]
