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


@pytest.mark.parametrize("where", ["loop", "thread", "hop", "hop-inline"])
@pytest.mark.parametrize("engine", ["numpy", "onnxruntime"])
async def test_add_sub_in_every_variant(where: str, engine: str) -> None:
    compute = (
        bare_servicer.onnxruntime_add_sub()
        if engine == "onnxruntime" and not where.startswith("hop")
        else bare_servicer.numpy_add_sub
    )
    servicer = bare_servicer.BareServicer(compute, where == "thread")
    if where.startswith("hop"):  # the model in a second process, behind a socketpair
        inline = where == "hop-inline"  # on that process's loop, not in a thread
        servicer.model_thread = await bare_servicer.Hop.start(engine == "onnxruntime", inline)
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
    if where.startswith("hop"):
        servicer.model_thread.close()


async def test_unknown_model_is_not_found() -> None:
    servicer = bare_servicer.BareServicer()
    request = pb.ModelInferRequest(model_name="nope")
    with pytest.raises(RuntimeError, match="NOT_FOUND: unknown model 'nope'"):
        await servicer.ModelInfer(request, _Context())  # type: ignore[arg-type]


async def test_simple_answers_what_perf_analyzer_reads() -> None:
    """perf_analyzer reads ServerMetadata, ModelMetadata and ModelConfig before it sends
    ``simple`` (INT32 [1,16] x 2): all three answer as Triton's, and the sum and difference
    come back as INT32."""
    servicer = bare_servicer.BareServicer()
    context: Any = _Context()
    server = await servicer.ServerMetadata(pb.ServerMetadataRequest(), context)
    assert server.version
    metadata = await servicer.ModelMetadata(pb.ModelMetadataRequest(name="simple"), context)
    assert [(t.name, t.datatype, list(t.shape)) for t in metadata.inputs] == [
        ("INPUT0", "INT32", [-1, 16]),
        ("INPUT1", "INT32", [-1, 16]),
    ]
    config = (await servicer.ModelConfig(pb.ModelConfigRequest(name="simple"), context)).config
    assert config.max_batch_size == 8
    assert [(t.name, list(t.dims)) for t in config.output] == [("OUTPUT0", [16]), ("OUTPUT1", [16])]
    a, b = np.arange(16, dtype=np.int32).reshape(1, 16), np.full((1, 16), 3, np.int32)
    request = pb.ModelInferRequest(model_name="simple")
    for name, value in (("INPUT0", a), ("INPUT1", b)):
        request.inputs.add(name=name, datatype="INT32", shape=value.shape)
        request.raw_input_contents.append(value.tobytes())
    response = await servicer.ModelInfer(request, context)
    assert [(o.name, o.datatype) for o in response.outputs] == [
        ("OUTPUT0", "INT32"),
        ("OUTPUT1", "INT32"),
    ]
    assert np.frombuffer(response.raw_output_contents[0], np.int32).tolist() == (a + b)[0].tolist()
    assert np.frombuffer(response.raw_output_contents[1], np.int32).tolist() == (a - b)[0].tolist()
    with pytest.raises(RuntimeError, match="NOT_FOUND"):
        await servicer.ModelConfig(pb.ModelConfigRequest(name="nope"), context)
