"""cpu-bench's models as MLServer custom runtimes (issue 37): add_sub and identity in numpy,
what Triton's python backend runs for the same workloads, and ``Served``, the count of
answered requests that ModelStatistics gives for ours and Triton (MLServer has none).

Imported by MLServer's own interpreter (its virtual environment, ``loadtest/mlserver.py``),
never by this project's: ``mlserver`` is not one of the project's dependencies.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
from mlserver import MLModel
from mlserver.codecs import NumpyCodec
from mlserver.types import InferenceRequest, InferenceResponse, ResponseOutput

# Requests answered per model, in this process: the one that runs predict (the inference
# worker under parallel_workers 1, the server's own under 0), where ``Served`` runs too.
SERVED: Counter[str] = Counter()


class _Runtime(MLModel):  # type: ignore[misc]
    """Inputs by name as numpy arrays in, named arrays out, each request counted."""

    def outputs(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        raise NotImplementedError

    def requests(self, inputs: dict[str, np.ndarray]) -> int:
        """Requests in this call: one, or the rows of an adaptive batch (add_sub's
        requests carry one row each; MLServer concatenates them on the first axis)."""
        return 1

    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        inputs = {i.name: NumpyCodec.decode_input(i) for i in payload.inputs}
        outputs = [NumpyCodec.encode_output(n, a) for n, a in self.outputs(inputs).items()]
        SERVED[self.name] += self.requests(inputs)
        return InferenceResponse(model_name=self.name, model_version=self.version, outputs=outputs)


class AddSub(_Runtime):
    """OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1 (Triton's add_sub example)."""

    def outputs(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        a, b = inputs["INPUT0"], inputs["INPUT1"]
        return {"OUTPUT0": a + b, "OUTPUT1": a - b}

    def requests(self, inputs: dict[str, np.ndarray]) -> int:
        return 1 if self.settings.max_batch_size <= 1 else int(inputs["INPUT0"].shape[0])


class Identity(_Runtime):
    """OUTPUT0 = INPUT0."""

    def outputs(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {"OUTPUT0": inputs["INPUT0"]}


class Served(MLModel):  # type: ignore[misc]
    """One INT64 [1] output per model that answered, named after it: its count so far."""

    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        outputs = [
            ResponseOutput(name=name, datatype="INT64", shape=[1], data=[count])
            for name, count in SERVED.items()
        ]
        return InferenceResponse(model_name=self.name, outputs=outputs)
