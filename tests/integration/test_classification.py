"""The v2 ``classification`` extension over gRPC: an output asked with ``classification: N``
comes back as BYTES "value:index[:label]" strings, the top N per batch entry, as Triton's
frontends format them; the server advertises the extension; bad counts are refused."""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from integration_support import expect_error, running_server
from tritonclient.grpc import service_pb2, service_pb2_grpc
from v1_support import build_repository


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    repo = build_repository(tmp_path_factory.mktemp("classification_repo"))
    args = ["--model-control-mode", "explicit", "--load-model", "*"]
    with running_server([repo], args) as server:
        yield server.url


@pytest.fixture(scope="module")
def client(url: str) -> Iterator[grpcclient.InferenceServerClient]:
    with grpcclient.InferenceServerClient(url) as c:
        yield c


def _infer(
    client: grpcclient.InferenceServerClient, model: str, data: np.ndarray, count: int
) -> grpcclient.InferResult:
    inp = grpcclient.InferInput("INPUT", list(data.shape), "FP32")
    inp.set_data_from_numpy(data)
    out = grpcclient.InferRequestedOutput("PROB", class_count=count)
    return client.infer(model, [inp], outputs=[out])


def test_extension_is_advertised(client: grpcclient.InferenceServerClient) -> None:
    assert "classification" in client.get_server_metadata().extensions


def test_batched_top_classes_with_labels(client: grpcclient.InferenceServerClient) -> None:
    data = np.array([[0.1, 0.7, 0.05, 0.15], [0.4, 0.1, 0.2, 0.3]], dtype=np.float32)
    result = _infer(client, "classifier", data, 2)
    out = result.get_output("PROB")
    assert out.datatype == "BYTES" and list(out.shape) == [2, 2]
    assert result.as_numpy("PROB").tolist() == [
        [b"0.700000:1:one", b"0.150000:3:three"],
        [b"0.400000:0:zero", b"0.300000:3:three"],
    ]


def test_unbatched_and_count_above_class_count(client: grpcclient.InferenceServerClient) -> None:
    data = np.array([0.25, 0.5, 1.0, 0.0], dtype=np.float32)
    result = _infer(client, "classifier_nobatch", data, 9)  # more than the 4 classes
    assert list(result.get_output("PROB").shape) == [4]
    assert result.as_numpy("PROB").tolist() == [
        b"1.000000:2:two",
        b"0.500000:1:one",
        b"0.250000:0:zero",
        b"0.000000:3:three",
    ]


def test_plain_outputs_unchanged_beside_classification(
    client: grpcclient.InferenceServerClient,
) -> None:
    data = np.array([[1.0, 2.0, 3.0, 4.0]], dtype=np.float32)
    inp = grpcclient.InferInput("INPUT", [1, 4], "FP32")
    inp.set_data_from_numpy(data)
    result = client.infer("classifier", [inp], outputs=[grpcclient.InferRequestedOutput("PROB")])
    np.testing.assert_array_equal(result.as_numpy("PROB"), data)


def test_bad_classification_requests(client: grpcclient.InferenceServerClient) -> None:
    data = np.zeros((1, 4), dtype=np.float32)
    expect_error(
        lambda: _infer(client, "classifier", data, -1),
        "INVALID_ARGUMENT",
        "invalid value for 'classification' parameter, expected >= 0",
    )
    inp = grpcclient.InferInput("INPUT0", [1, 1], "BYTES")
    inp.set_data_from_numpy(np.array([[b"x"]], dtype=np.object_))
    expect_error(
        lambda: client.infer(
            "strings", [inp], outputs=[grpcclient.InferRequestedOutput("OUTPUT0", class_count=1)]
        ),
        "INVALID_ARGUMENT",
        "class result not available for output due to unsupported type 'BYTES'",
    )
    # The server keeps serving.
    assert _infer(client, "classifier", data + 1, 1).as_numpy("PROB").shape == (1, 1)


def test_uint64_classification_is_refused_as_triton_does(url: str) -> None:
    """tritonclient always sends int64_param; a client built from the protos may send
    uint64_param, which Triton refuses by its type."""
    request = service_pb2.ModelInferRequest(model_name="classifier")
    tensor = request.inputs.add(name="INPUT", datatype="FP32", shape=[1, 4])
    tensor.contents.fp32_contents.extend([0.1, 0.2, 0.3, 0.4])
    output = request.outputs.add(name="PROB")
    output.parameters["classification"].uint64_param = 2
    with grpc.insecure_channel(url) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        with pytest.raises(grpc.RpcError) as caught:
            stub.ModelInfer(request, timeout=10)
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert caught.value.details() == (
            "invalid value type for 'classification' parameter, expected int64_param"
        )
        output.parameters["classification"].int64_param = 2
        answer = stub.ModelInfer(request, timeout=10)
        assert answer.outputs[0].datatype == "BYTES" and list(answer.outputs[0].shape) == [1, 2]
