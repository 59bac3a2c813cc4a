"""The benchmark's yardstick and its floors answer add_sub correctly in every variant.

cpu-bench (loadtest) compares our server's CPU per request with these servicers; a floor that
computed something else (or nothing) would make that comparison meaningless.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from inference import grpc_service_pb2 as pb
from loadtest.scenarios import bare_servicer


class _Context:
    async def abort(self, code: Any, message: str) -> None:
        raise RuntimeError(f"{code}: {message}")


def _request(a: np.ndarray[Any, Any], b: np.ndarray[Any, Any]) -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name="add_sub", id="r1")
    for name, value in (("INPUT0", a), ("INPUT1", b)):
        request.inputs.add(name=name, datatype="FP32", shape=value.shape)
        request.raw_input_contents.append(value.tobytes())
    return request


@pytest.mark.parametrize("where", ["loop", "thread", "hop"])
@pytest.mark.parametrize("engine", ["numpy", "onnxruntime"])
async def test_add_sub_in_every_variant(where: str, engine: str) -> None:
    compute = (
        bare_servicer.onnxruntime_add_sub()
        if engine == "onnxruntime" and where != "hop"
        else bare_servicer.numpy_add_sub
    )
    servicer = bare_servicer.BareServicer(compute, where == "thread")
    if where == "hop":  # the model thread in a second process, behind a socketpair
        servicer.model_thread = await bare_servicer.Hop.start(engine == "onnxruntime")
    rng = np.random.default_rng(1)
    a = rng.standard_normal((1, 16)).astype(np.float32)
    b = rng.standard_normal((1, 16)).astype(np.float32)
    for _ in range(3):  # the model thread serves one request after another
        response = await servicer.ModelInfer(_request(a, b), _Context())  # type: ignore[arg-type]
        assert response.id == "r1"
        assert [o.name for o in response.outputs] == ["OUTPUT0", "OUTPUT1"]
        assert list(response.outputs[0].shape) == [1, 16]
        total = np.frombuffer(response.raw_output_contents[0], np.float32)
        difference = np.frombuffer(response.raw_output_contents[1], np.float32)
        np.testing.assert_allclose(total, (a + b).ravel(), rtol=1e-6)
        np.testing.assert_allclose(difference, (a - b).ravel(), rtol=1e-6)
    assert servicer.successes["add_sub"] == 3
    if where == "hop":
        servicer.model_thread.close()


async def test_unknown_model_is_not_found() -> None:
    servicer = bare_servicer.BareServicer()
    request = pb.ModelInferRequest(model_name="nope")
    with pytest.raises(RuntimeError, match="NOT_FOUND: unknown model 'nope'"):
        await servicer.ModelInfer(request, _Context())  # type: ignore[arg-type]
