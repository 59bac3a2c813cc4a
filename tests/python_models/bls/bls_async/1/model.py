"""``async def execute``: N BLS requests to 'bls_batched' at once (``async_exec``); SUMS[i]
is OUTPUT0 of request i (INPUT0 = INPUT1 = i everywhere), so 2 * i * 4 elements."""

import asyncio

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    async def execute(self, requests):
        responses = []
        for request in requests:
            n = int(pb_utils.get_input_tensor_by_name(request, "N").as_numpy()[0])
            calls = []
            for i in range(n):
                x = np.full((1, 4), i, np.float32)
                call = pb_utils.InferenceRequest(
                    model_name="bls_batched",
                    inputs=[pb_utils.Tensor("INPUT0", x), pb_utils.Tensor("INPUT1", x)],
                    requested_output_names=["OUTPUT0"],
                )
                calls.append(call.async_exec())
            answers = await asyncio.gather(*calls)
            sums = []
            for answer in answers:
                if answer.has_error():
                    raise pb_utils.TritonModelException(answer.error().message())
                sums.append(
                    float(pb_utils.get_output_tensor_by_name(answer, "OUTPUT0").as_numpy().sum())
                )
            responses.append(
                pb_utils.InferenceResponse([pb_utils.Tensor("SUMS", np.array(sums, np.float32))])
            )
        return responses
