"""Helpers shared by the integration tests (client environment: tritonclient, grpc, numpy).

Named ``integration_support`` rather than ``helpers`` so it cannot clash with another test
folder's module of the same name: there are no ``__init__.py`` files under tests/, and
pytest's default import mode puts each test folder on sys.path by its bare module names.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from server_process import ServerProcess
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

Tensor = service_pb2.ModelInferRequest.InferInputTensor
RequestedOutput = service_pb2.ModelInferRequest.InferRequestedOutputTensor

# The iris rows the default repository's README documents (data set rows 0, 50 and 100).
IRIS_ROWS = np.array(
    [[5.1, 3.5, 1.4, 0.2], [7.0, 3.2, 4.7, 1.4], [6.3, 3.3, 6.0, 2.5]], dtype=np.float32
)
IRIS_LABELS = np.array([[0], [1], [2]], dtype=np.int64)
IRIS_PROBABILITIES = np.array(
    [[0.982, 0.018, 0.000], [0.002, 0.874, 0.124], [0.000, 0.004, 0.996]], dtype=np.float32
)


def infer_input(name: str, array: np.ndarray, datatype: str) -> grpcclient.InferInput:
    tensor = grpcclient.InferInput(name, list(array.shape), datatype)
    tensor.set_data_from_numpy(array)
    return tensor


def add_sub_inputs(
    a: np.ndarray, b: np.ndarray, datatype: str = "FP32"
) -> list[grpcclient.InferInput]:
    return [infer_input("INPUT0", a, datatype), infer_input("INPUT1", b, datatype)]


def bytes_array(items: Sequence[str | bytes]) -> np.ndarray:
    out = np.empty(len(items), dtype=np.object_)
    out[:] = [i.encode("utf-8") if isinstance(i, str) else i for i in items]
    return out


def assert_add_sub_serves(client: grpcclient.InferenceServerClient, model: str = "add_sub") -> None:
    """A known-good request: the server is still serving after whatever came before."""
    a = np.array([[1.0, 2.0, 3.0]], dtype=np.float32)
    b = np.array([[10.0, 20.0, 30.0]], dtype=np.float32)
    result = client.infer(model, add_sub_inputs(a, b))
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)


def expect_error(
    call: Callable[[], Any],
    code: str,
    message: str | None = None,
    *,
    contains: Sequence[str] = (),
) -> InferenceServerException:
    """Run a tritonclient call that must fail with ``code`` (e.g. "INVALID_ARGUMENT").

    ``message`` is compared exactly; ``contains`` are fragments that must all appear.
    """
    with pytest.raises(InferenceServerException) as info:
        call()
    error = info.value
    assert error.status() == f"StatusCode.{code}", f"{error.status()}: {error.message()}"
    if message is not None:
        assert error.message() == message
    for fragment in contains:
        assert fragment in (error.message() or ""), error.message()
    return error


def expect_rpc_error(
    call: Callable[[], Any],
    code: grpc.StatusCode,
    message: str | None = None,
    *,
    contains: Sequence[str] = (),
) -> grpc.RpcError:
    """As ``expect_error`` for raw grpc stubs (hand-crafted protobuf requests)."""
    with pytest.raises(grpc.RpcError) as info:
        call()
    error = info.value
    assert error.code() == code, f"{error.code()}: {error.details()}"
    if message is not None:
        assert error.details() == message
    for fragment in contains:
        assert fragment in (error.details() or ""), error.details()
    return error


@contextlib.contextmanager
def grpc_stub(url: str) -> Iterator[service_pb2_grpc.GRPCInferenceServiceStub]:
    """A raw stub over a fresh channel, for requests tritonclient refuses to build."""
    channel = grpc.insecure_channel(url)
    try:
        yield service_pb2_grpc.GRPCInferenceServiceStub(channel)
    finally:
        channel.close()


def raw_tensor(name: str, datatype: str, shape: Sequence[int], **contents: Sequence[Any]) -> Any:
    """An InferInputTensor; keyword arguments fill typed ``contents`` fields."""
    tensor = Tensor(name=name, datatype=datatype, shape=list(shape))
    for field, values in contents.items():
        getattr(tensor.contents, field).extend(values)
    return tensor


def decode_output(response: Any, name: str, dtype: np.dtype[Any] | type) -> np.ndarray:
    """A fixed-size output of a raw ModelInferResponse, as numpy with its shape."""
    for index, output in enumerate(response.outputs):
        if output.name == name:
            data = np.frombuffer(response.raw_output_contents[index], dtype=dtype)
            return data.reshape(list(output.shape))
    raise AssertionError(f"no output {name!r} in {[o.name for o in response.outputs]}")


@contextlib.contextmanager
def running_server(*args: Any, **kwargs: Any) -> Iterator[ServerProcess]:
    """A ServerProcess that must stop cleanly (exit code 0) when the block ends."""
    server = ServerProcess(*args, **kwargs).start()
    try:
        yield server
    finally:
        code = server.stop()
        assert code == 0, f"server exited with {code}:\n{server.log}"


def wait_for_log(server: ServerProcess, fragment: str, timeout: float = 10.0) -> None:
    server.wait_for_log(fragment, timeout)
