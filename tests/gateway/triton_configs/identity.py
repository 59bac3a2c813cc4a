import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        import json

        cfg = json.loads(args["model_config"])
        self.decoupled = pb_utils.using_decoupled_model_transaction_policy(cfg)

    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            resp = pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", x)])
            if self.decoupled:
                sender = request.get_response_sender()
                sender.send(resp, flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            else:
                responses.append(resp)
        return None if self.decoupled else responses
