"""Bad requests: one test per class, each checking the status code and the exact message.

Messages follow Triton's wording where Triton has one (clients and test suites match on the
text). After every test on the shared server a known-good request must still succeed.
Requests tritonclient refuses to build (raw/contents mix-ups) are hand-crafted protobufs.
"""

from __future__ import annotations

import queue
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import models
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from integration_support import (
    add_sub_inputs,
    assert_add_sub_serves,
    decode_output,
    expect_error,
    expect_rpc_error,
    grpc_stub,
    infer_input,
    raw_tensor,
    running_server,
)
from onnx import TensorProto, helper
from server_process import DEFAULT_REPOSITORY, ServerProcess
from tritonclient.grpc import service_pb2

ONES = np.ones((1, 3), dtype=np.float32)
INVALID = "INVALID_ARGUMENT"
# Triton's LogRequest() prefix of a request without an id.
UNKNOWN_ID = "[request id: <id_unknown>] "
BATCH_NOTE = (
    "NOTE: Setting a non-zero max_batch_size in the model config requires a batch dimension "
    "to be prepended to each input shape. If you want to specify the full shape including the "
    "batch dim in your input dims config, try setting max_batch_size to zero. See the model "
    "configuration docs for more info on max_batch_size."
)


@pytest.fixture(autouse=True)
def still_serving(request: pytest.FixtureRequest) -> Iterator[None]:
    """After each test on the shared server, a good request still succeeds."""
    yield
    if "client" in request.fixturenames:
        assert_add_sub_serves(request.getfixturevalue("client"))


def _raw_infer(url: str, request: Any) -> Any:
    with grpc_stub(url) as stub:
        return stub.ModelInfer(request, timeout=30)


# --- model and version lookup ---------------------------------------------------------


def test_unknown_model(client: grpcclient.InferenceServerClient) -> None:
    message = "Request for unknown model: 'nope' is not found"
    expect_error(lambda: client.infer("nope", add_sub_inputs(ONES, ONES)), "NOT_FOUND", message)
    expect_error(lambda: client.get_model_metadata("nope"), "NOT_FOUND", message)
    expect_error(lambda: client.get_model_config("nope"), "NOT_FOUND", message)
    assert client.is_model_ready("nope") is False


def test_unknown_version(client: grpcclient.InferenceServerClient) -> None:
    message = "Request for unknown model: 'add_sub' version 3 is not found"
    expect_error(
        lambda: client.infer("add_sub", add_sub_inputs(ONES, ONES), model_version="3"),
        "NOT_FOUND",
        message,
    )
    expect_error(lambda: client.get_model_metadata("add_sub", "3"), "NOT_FOUND", message)
    assert client.is_model_ready("add_sub", "3") is False


def test_non_numeric_version(client: grpcclient.InferenceServerClient) -> None:
    # Triton's exact wording, since clients match on it.
    message = (
        "failed to get model version from specified version string 'abc' (details: stol), "
        "version should be an integral value > 0"
    )
    expect_error(
        lambda: client.infer("add_sub", add_sub_inputs(ONES, ONES), model_version="abc"),
        INVALID,
        message,
    )
    expect_error(lambda: client.get_model_metadata("add_sub", "abc"), INVALID, message)
    assert client.is_model_ready("add_sub", "abc") is False


# --- batch, datatype, shape ------------------------------------------------------------


def test_batch_too_large(client: grpcclient.InferenceServerClient) -> None:
    nine = np.ones((9, 3), dtype=np.float32)
    expect_error(
        lambda: client.infer("add_sub", add_sub_inputs(nine, nine)),
        INVALID,
        f"{UNKNOWN_ID}inference request batch-size must be <= 8 for 'add_sub'",
    )
    eight = np.arange(24, dtype=np.float32).reshape(8, 3)  # the limit itself is fine
    result = client.infer("add_sub", add_sub_inputs(eight, eight))
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), eight * 2)


def test_batch_size_zero(client: grpcclient.InferenceServerClient) -> None:
    empty = np.ones((0, 3), dtype=np.float32)
    expect_error(
        lambda: client.infer("add_sub", add_sub_inputs(empty, empty)),
        INVALID,
        f"{UNKNOWN_ID}inference request batch-size must be >= 1 for 'add_sub'",
    )


def test_wrong_datatype(client: grpcclient.InferenceServerClient) -> None:
    ints = np.ones((1, 3), dtype=np.int32)
    expect_error(
        lambda: client.infer("add_sub", add_sub_inputs(ints, ints, "INT32")),
        INVALID,
        f"{UNKNOWN_ID}inference input 'INPUT1' data-type is 'INT32', but model 'add_sub' "
        "expects 'FP32'",
    )


@pytest.mark.parametrize(
    ("shape", "shown"), [((1, 3), "[1,3]"), ((4,), "[4]"), ((1, 2, 4), "[1,2,4]")]
)
def test_wrong_shape(
    client: grpcclient.InferenceServerClient, shape: tuple[int, ...], shown: str
) -> None:
    x = np.ones(shape, dtype=np.float32)
    expect_error(
        lambda: client.infer("iris_classifier", [infer_input("input", x, "FP32")]),
        INVALID,
        f"{UNKNOWN_ID}unexpected shape for input 'input' for model 'iris_classifier'. "
        f"Expected [-1,4], got {shown}. {BATCH_NOTE}",
    )


def test_mismatched_batch_sizes(client: grpcclient.InferenceServerClient) -> None:
    expect_error(
        lambda: client.infer(
            "add_sub", add_sub_inputs(np.ones((2, 3), np.float32), np.ones((1, 3), np.float32))
        ),
        INVALID,
        f"{UNKNOWN_ID}input 'INPUT0' batch size does not match other inputs for 'add_sub'",
    )


def test_no_batch_dimension(client: grpcclient.InferenceServerClient) -> None:
    scalar = np.array(1.0, dtype=np.float32)
    expect_error(
        lambda: client.infer("add_sub", add_sub_inputs(scalar, scalar)),
        INVALID,
        f"{UNKNOWN_ID}input 'INPUT1' has no shape but model requires batch dimension for 'add_sub'",
    )


# --- inputs and outputs by name -------------------------------------------------------


def test_unexpected_input(client: grpcclient.InferenceServerClient) -> None:
    inputs = [infer_input("INPUT0", ONES, "FP32"), infer_input("EXTRA", ONES, "FP32")]
    expect_error(
        lambda: client.infer("add_sub", inputs),
        INVALID,
        "unexpected inference input 'EXTRA' for model 'add_sub'",
    )


def test_too_many_inputs(client: grpcclient.InferenceServerClient) -> None:
    """Triton's count check comes first; its "missing" list reads "]" when none is missing,
    and "Got input(s)" follows its hash map's order."""
    inputs = [*add_sub_inputs(ONES, ONES), infer_input("EXTRA", ONES, "FP32")]
    expect_error(
        lambda: client.infer("add_sub", inputs),
        INVALID,
        f"{UNKNOWN_ID}expected 2 inputs but got 3 inputs for model 'add_sub'. Got input(s) "
        "['EXTRA','INPUT1','INPUT0'], but missing required input(s) ]. Please provide all "
        "required input(s).",
    )


def test_missing_input(client: grpcclient.InferenceServerClient) -> None:
    expect_error(
        lambda: client.infer("add_sub", [infer_input("INPUT0", ONES, "FP32")]),
        INVALID,
        f"{UNKNOWN_ID}expected 2 inputs but got 1 inputs for model 'add_sub'. Got input(s) "
        "['INPUT0'], but missing required input(s) ['INPUT1']. Please provide all required "
        "input(s).",
    )


def test_duplicate_input(client: grpcclient.InferenceServerClient) -> None:
    inputs = [infer_input("INPUT0", ONES, "FP32"), infer_input("INPUT0", ONES, "FP32")]
    expect_error(
        lambda: client.infer("add_sub", inputs),
        INVALID,
        f"{UNKNOWN_ID}input 'INPUT0' already exists in request",
    )


def test_unexpected_requested_output(client: grpcclient.InferenceServerClient) -> None:
    expect_error(
        lambda: client.infer(
            "add_sub",
            add_sub_inputs(ONES, ONES),
            outputs=[
                grpcclient.InferRequestedOutput("OUTPUT0"),
                grpcclient.InferRequestedOutput("OUTPUT9"),
            ],
        ),
        INVALID,
        "unexpected inference output 'OUTPUT9' for model 'add_sub'",
    )


# --- tensor data: raw and typed contents (hand-crafted protobufs) -----------------------


def _add_sub_request(*tensors: Any, raw: list[bytes] | None = None, **fields: Any) -> Any:
    return service_pb2.ModelInferRequest(
        model_name="add_sub", inputs=list(tensors), raw_input_contents=raw or [], **fields
    )


GOOD_RAW = np.array([1, 2, 3], dtype=np.float32).tobytes()


def test_raw_byte_size_mismatch(default_server: ServerProcess, client: Any) -> None:
    request = _add_sub_request(
        raw_tensor("INPUT0", "FP32", [1, 3]),
        raw_tensor("INPUT1", "FP32", [1, 3]),
        raw=[GOOD_RAW[:8], GOOD_RAW],
    )
    expect_rpc_error(
        lambda: _raw_infer(default_server.url, request),
        grpc.StatusCode.INVALID_ARGUMENT,
        f"{UNKNOWN_ID}input byte size mismatch for input 'INPUT0' for model 'add_sub'. "
        "Expected 12, got 8",
    )


def test_typed_contents_count_mismatch(default_server: ServerProcess, client: Any) -> None:
    request = _add_sub_request(
        raw_tensor("INPUT0", "FP32", [1, 3], fp32_contents=[1.0, 2.0]),
        raw_tensor("INPUT1", "FP32", [1, 3], fp32_contents=[1.0, 2.0, 3.0]),
    )
    expect_rpc_error(
        lambda: _raw_infer(default_server.url, request),
        grpc.StatusCode.INVALID_ARGUMENT,
        f"{UNKNOWN_ID}input byte size mismatch for input 'INPUT0' for model 'add_sub'. "
        "Expected 12, got 8",
    )
    strings = service_pb2.ModelInferRequest(
        model_name="text_upper",
        inputs=[raw_tensor("TEXT", "BYTES", [2], bytes_contents=[b"only one"])],
    )
    expect_rpc_error(
        lambda: _raw_infer(default_server.url, strings),
        grpc.StatusCode.INVALID_ARGUMENT,
        f"{UNKNOWN_ID}expected 2 string elements for inference input 'TEXT' for model "
        "'text_upper', got 1",
    )


def test_typed_contents_good(default_server: ServerProcess, client: Any) -> None:
    """Control for the contents tests: the right typed field is accepted and computed."""
    request = _add_sub_request(
        raw_tensor("INPUT0", "FP32", [1, 3], fp32_contents=[1.0, 2.0, 3.0]),
        raw_tensor("INPUT1", "FP32", [1, 3], fp32_contents=[0.5, 0.25, -3.0]),
    )
    response = _raw_infer(default_server.url, request)
    np.testing.assert_array_equal(
        decode_output(response, "OUTPUT0", np.float32), [[1.5, 2.25, 0.0]]
    )
    np.testing.assert_array_equal(
        decode_output(response, "OUTPUT1", np.float32), [[0.5, 1.75, 6.0]]
    )


def test_contents_in_wrong_typed_field(default_server: ServerProcess, client: Any) -> None:
    request = _add_sub_request(
        raw_tensor("INPUT0", "FP32", [1, 3], int_contents=[1, 2, 3]),
        raw_tensor("INPUT1", "FP32", [1, 3], fp32_contents=[1.0, 2.0, 3.0]),
    )
    expect_rpc_error(
        lambda: _raw_infer(default_server.url, request),
        grpc.StatusCode.INVALID_ARGUMENT,
        "unexpected explicit tensor data for input tensor 'INPUT0' for model 'add_sub' of "
        "type 'INT32', expected datatype 'FP32'",
    )


def test_raw_and_contents_both_set(default_server: ServerProcess, client: Any) -> None:
    request = _add_sub_request(
        raw_tensor("INPUT0", "FP32", [1, 3], fp32_contents=[1.0, 2.0, 3.0]),
        raw_tensor("INPUT1", "FP32", [1, 3]),
        raw=[GOOD_RAW, GOOD_RAW],
    )
    expect_rpc_error(
        lambda: _raw_infer(default_server.url, request),
        grpc.StatusCode.INVALID_ARGUMENT,
        "contents field must not be specified when using raw_input_contents for 'INPUT0' "
        "for model 'add_sub'",
    )


def test_raw_input_contents_count_mismatch(default_server: ServerProcess, client: Any) -> None:
    request = _add_sub_request(
        raw_tensor("INPUT0", "FP32", [1, 3]),
        raw_tensor("INPUT1", "FP32", [1, 3]),
        raw=[GOOD_RAW],
    )
    expect_rpc_error(
        lambda: _raw_infer(default_server.url, request),
        grpc.StatusCode.INVALID_ARGUMENT,
        "unable to find data for input tensor 'INPUT1' for model 'add_sub' in request.",
    )


def test_contents_in_two_typed_fields(default_server: ServerProcess, client: Any) -> None:
    request = _add_sub_request(
        raw_tensor("INPUT0", "FP32", [1, 3], fp32_contents=[1.0, 2.0, 3.0], fp64_contents=[1.0]),
        raw_tensor("INPUT1", "FP32", [1, 3], fp32_contents=[1.0, 2.0, 3.0]),
    )
    expect_rpc_error(
        lambda: _raw_infer(default_server.url, request),
        grpc.StatusCode.INVALID_ARGUMENT,
        "unexpected explicit tensor data for input tensor 'INPUT0' for model 'add_sub', "
        "binary data was already supplied.",
    )


def test_extra_raw_input_contents_are_ignored(default_server: ServerProcess, client: Any) -> None:
    """As Triton: raw contents pair with the inputs in order; extra ones are not read."""
    request = _add_sub_request(
        raw_tensor("INPUT0", "FP32", [1, 3]),
        raw_tensor("INPUT1", "FP32", [1, 3]),
        raw=[GOOD_RAW, GOOD_RAW, b"spare"],
    )
    response = _raw_infer(default_server.url, request)
    np.testing.assert_array_equal(decode_output(response, "OUTPUT0", np.float32), [[2, 4, 6]])


def test_input_without_data(default_server: ServerProcess, client: Any) -> None:
    request = _add_sub_request(
        raw_tensor("INPUT0", "FP32", [1, 3]), raw_tensor("INPUT1", "FP32", [1, 3])
    )
    expect_rpc_error(
        lambda: _raw_infer(default_server.url, request),
        grpc.StatusCode.INVALID_ARGUMENT,
        "unable to find data for input tensor 'INPUT0' for model 'add_sub' in request.",
    )


def _length_prefixed(*items: bytes) -> bytes:
    return b"".join(struct.pack("<I", len(i)) + i for i in items)


BYTES_WHERE = "for inference input 'TEXT' for model 'text_upper'"


@pytest.mark.parametrize(
    ("shape", "raw", "detail"),
    [
        ([1], struct.pack("<I", 5) + b"ab", None),
        (
            [2],
            _length_prefixed(b"ok") + b"\x01\x00",
            f"incomplete string length indicator {BYTES_WHERE}, expecting 4 bytes but only 2 "
            "bytes available. Please make sure the string length indicator is in one buffer.",
        ),
        ([2], _length_prefixed(b"one"), f"expected 2 string elements {BYTES_WHERE}, got 1"),
        (
            [1],
            _length_prefixed(b"a", b"b"),
            f"unexpected number of string elements 2 {BYTES_WHERE}, expecting 1",
        ),
    ],
    ids=["overrun", "truncated-prefix", "too-few", "too-many"],
)
def test_malformed_bytes_raw_data(
    default_server: ServerProcess, client: Any, shape: list[int], raw: bytes, detail: str | None
) -> None:
    """Triton's ValidateBytesInputs texts; an overrunning last element (which Triton lets
    through to the backend) is refused with our own text."""
    request = service_pb2.ModelInferRequest(
        model_name="text_upper",
        inputs=[raw_tensor("TEXT", "BYTES", shape)],
        raw_input_contents=[raw],
    )
    if detail is None:
        detail = f"incomplete string element 0 {BYTES_WHERE}: 5 bytes announced, 2 present"
    expect_rpc_error(
        lambda: _raw_infer(default_server.url, request),
        grpc.StatusCode.INVALID_ARGUMENT,
        f"{UNKNOWN_ID}{detail}",
    )


def test_bytes_raw_data_well_formed(default_server: ServerProcess, client: Any) -> None:
    """Control for the malformed cases: the same framing done right, empty string included."""
    request = service_pb2.ModelInferRequest(
        model_name="text_upper",
        inputs=[raw_tensor("TEXT", "BYTES", [3])],
        raw_input_contents=[_length_prefixed(b"ab", b"", b"c d")],
    )
    response = _raw_infer(default_server.url, request)
    assert response.raw_output_contents[0] == _length_prefixed(b"AB", b"", b"C D")


# --- request id prefix -----------------------------------------------------------------

ID_CASES = {
    "batch": (
        lambda: add_sub_inputs(np.ones((9, 1), np.float32), np.ones((9, 1), np.float32)),
        "add_sub",
        INVALID,
        "inference request batch-size must be <= 8 for 'add_sub'",
    ),
    "datatype": (
        lambda: add_sub_inputs(np.ones((1, 1), np.int32), np.ones((1, 1), np.int32), "INT32"),
        "add_sub",
        INVALID,
        "inference input 'INPUT1' data-type is 'INT32', but model 'add_sub' expects 'FP32'",
    ),
    "missing": (
        lambda: [infer_input("INPUT1", ONES, "FP32")],
        "add_sub",
        INVALID,
        "expected 2 inputs but got 1 inputs for model 'add_sub'. Got input(s) ['INPUT1'], "
        "but missing required input(s) ['INPUT0']. Please provide all required input(s).",
    ),
}


@pytest.mark.parametrize("case", list(ID_CASES))
def test_request_id_prefix(client: grpcclient.InferenceServerClient, case: str) -> None:
    make_inputs, model, code, message = ID_CASES[case]
    expect_error(
        lambda: client.infer(model, make_inputs(), request_id="req-17"),
        code,
        f"[request id: req-17] {message}",
    )
    # Without an id Triton's prefix says so.
    expect_error(lambda: client.infer(model, make_inputs()), code, f"{UNKNOWN_ID}{message}")


def test_frontend_errors_have_no_request_id_prefix(default_server: ServerProcess) -> None:
    """Triton's gRPC frontend checks (before the core sees the request) add no prefix."""
    request = _add_sub_request(
        raw_tensor("INPUT0", "FP32", [1, 3]), raw_tensor("INPUT1", "FP32", [1, 3]), id="req-9"
    )
    expect_rpc_error(
        lambda: _raw_infer(default_server.url, request),
        grpc.StatusCode.INVALID_ARGUMENT,
        "unable to find data for input tensor 'INPUT0' for model 'add_sub' in request.",
    )


def test_unknown_model_error_has_no_request_id_prefix(
    client: grpcclient.InferenceServerClient,
) -> None:
    """As in Triton: the model lookup fails before the request exists, so no prefix."""
    expect_error(
        lambda: client.infer("nope", add_sub_inputs(ONES, ONES), request_id="req-17"),
        "NOT_FOUND",
        "Request for unknown model: 'nope' is not found",
    )


# --- streaming ---------------------------------------------------------------------------


def test_stream_errors_in_band_and_stream_goes_on(default_server: ServerProcess) -> None:
    responses: queue.Queue[tuple[Any, Any]] = queue.Queue()
    a = np.array([[1.0, 2.0]], dtype=np.float32)
    with grpcclient.InferenceServerClient(default_server.url) as stream_client:
        stream_client.start_stream(callback=lambda result, error: responses.put((result, error)))
        try:
            stream_client.async_stream_infer("add_sub", add_sub_inputs(a, a), request_id="good-0")
            stream_client.async_stream_infer("nope", add_sub_inputs(a, a), request_id="bad-1")
            nine = np.ones((9, 2), np.float32)
            stream_client.async_stream_infer(
                "add_sub", add_sub_inputs(nine, nine), request_id="bad-2"
            )
            stream_client.async_stream_infer(
                "iris_classifier", [infer_input("input", a, "FP32")], request_id="bad-3"
            )
            for i in range(1, 4):
                stream_client.async_stream_infer(
                    "add_sub", add_sub_inputs(a * i, a), request_id=f"good-{i}"
                )
            results, errors = {}, []
            for _ in range(7):
                result, error = responses.get(timeout=30)
                if error is not None:
                    errors.append(error.message())
                else:
                    results[result.get_response().id] = result
        finally:
            stream_client.stop_stream()
    assert sorted(errors) == [
        "Request for unknown model: 'nope' is not found",  # no prefix, as in Triton
        "[request id: bad-2] inference request batch-size must be <= 8 for 'add_sub'",
        "[request id: bad-3] unexpected shape for input 'input' for model "
        f"'iris_classifier'. Expected [-1,4], got [1,2]. {BATCH_NOTE}",
    ]
    assert sorted(results) == ["good-0", "good-1", "good-2", "good-3"]
    for i in range(4):
        np.testing.assert_array_equal(results[f"good-{i}"].as_numpy("OUTPUT0"), a * max(i, 1) + a)


def test_stream_decode_error_in_band(default_server: ServerProcess) -> None:
    """Protobuf-level errors on a stream: error_message plus the echoed id; stream goes on."""
    bad = _add_sub_request(
        raw_tensor("INPUT0", "FP32", [1, 3]),
        raw_tensor("INPUT1", "FP32", [1, 3]),
        raw=[GOOD_RAW],
        id="raw-bad",
    )
    good = _add_sub_request(
        raw_tensor("INPUT0", "FP32", [1, 3]),
        raw_tensor("INPUT1", "FP32", [1, 3]),
        raw=[GOOD_RAW, GOOD_RAW],
        id="raw-good",
    )
    with grpc_stub(default_server.url) as stub:
        responses = list(stub.ModelStreamInfer(iter([bad, good]), timeout=30))
    by_id = {r.infer_response.id: r for r in responses}
    assert set(by_id) == {"raw-bad", "raw-good"}
    assert by_id["raw-bad"].error_message == (
        "unable to find data for input tensor 'INPUT1' for model 'add_sub' in request."
    )
    assert by_id["raw-bad"].infer_response.model_name == "add_sub"
    assert by_id["raw-good"].error_message == ""
    np.testing.assert_array_equal(
        decode_output(by_id["raw-good"].infer_response, "OUTPUT0", np.float32), [[2, 4, 6]]
    )


# --- message size limits (a server of their own) ----------------------------------------

LIMIT = 65536


@pytest.fixture(scope="module")
def fill_repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """'fill': INT64 SHAPE [1] -> FP32 ZEROS of that length (all 1.5): a tiny request can ask
    for a response of any size."""
    repo = tmp_path_factory.mktemp("fill_repo")
    graph = helper.make_graph(
        [
            helper.make_node(
                "ConstantOfShape",
                ["SHAPE"],
                ["ZEROS"],
                value=helper.make_tensor("value", TensorProto.FLOAT, [1], [1.5]),
            )
        ],
        "fill",
        [helper.make_tensor_value_info("SHAPE", TensorProto.INT64, [1])],
        [helper.make_tensor_value_info("ZEROS", TensorProto.FLOAT, [None])],
    )
    models.write_model(
        repo,
        "fill",
        models.make_model(graph),
        models.make_config("fill", [("SHAPE", "INT64", [1])], [("ZEROS", "FP32", [-1])]),
    )
    return repo


@pytest.fixture(scope="module")
def small_server(fill_repository: Path) -> Iterator[ServerProcess]:
    with running_server(
        [DEFAULT_REPOSITORY, fill_repository], ["--grpc-max-message-size", str(LIMIT)]
    ) as server:
        yield server


@pytest.fixture
def small_client(small_server: ServerProcess) -> Iterator[grpcclient.InferenceServerClient]:
    with grpcclient.InferenceServerClient(small_server.url) as c:
        yield c
        # Whatever the test did, the server keeps serving small requests.
        assert_add_sub_serves(c)
        _check_fill(c, 4)


def _fill_inputs(count: int) -> list[grpcclient.InferInput]:
    return [infer_input("SHAPE", np.array([count], dtype=np.int64), "INT64")]


def _check_fill(c: grpcclient.InferenceServerClient, count: int) -> None:
    result = c.infer("fill", _fill_inputs(count))
    np.testing.assert_array_equal(result.as_numpy("ZEROS"), np.full(count, 1.5, np.float32))


def test_request_larger_than_limit(small_client: grpcclient.InferenceServerClient) -> None:
    big = np.ones((1, 12800), dtype=np.float32)  # two inputs: 102,400 bytes of tensor data
    error = expect_error(
        lambda: small_client.infer("add_sub", add_sub_inputs(big, big)),
        "RESOURCE_EXHAUSTED",
        contains=["Received message larger than max", f"vs. {LIMIT})"],
    )
    assert "102" in error.message()  # the size grpc saw, about 102,4xx bytes


def test_response_larger_than_limit(small_client: grpcclient.InferenceServerClient) -> None:
    _check_fill(small_client, 16000)  # 64,000 bytes of output still fits
    expect_error(
        lambda: small_client.infer("fill", _fill_inputs(25000)),
        "RESOURCE_EXHAUSTED",
        f"response for model 'fill' is 100000 bytes, more than the server's max message "
        f"size {LIMIT}",
    )


def test_response_at_limit_plus_envelope(small_client: grpcclient.InferenceServerClient) -> None:
    """Outputs of exactly LIMIT bytes: the protobuf envelope (names, shape, model name)
    pushes the message over the limit, so it must be refused like any oversized response,
    with the message naming the model."""
    expect_error(
        lambda: small_client.infer("fill", _fill_inputs(LIMIT // 4)),
        "RESOURCE_EXHAUSTED",
        contains=["response for model 'fill'", f"max message size {LIMIT}"],
    )


@pytest.mark.parametrize("count", [25000, LIMIT // 4], ids=["far-over", "envelope-over"])
def test_stream_oversized_response_in_band(small_server: ServerProcess, count: int) -> None:
    """An oversized response on a stream is one in-band error; the stream carries on."""
    responses: queue.Queue[tuple[Any, Any]] = queue.Queue()
    with grpcclient.InferenceServerClient(small_server.url) as stream_client:
        stream_client.start_stream(callback=lambda result, error: responses.put((result, error)))
        try:
            stream_client.async_stream_infer("fill", _fill_inputs(count), request_id="big")
            result, error = responses.get(timeout=30)
            assert result is None and error is not None
            assert error.message().startswith("[request id: big] response for model 'fill'")
            assert f"max message size {LIMIT}" in error.message()
            stream_client.async_stream_infer("fill", _fill_inputs(3), request_id="small")
            result, error = responses.get(timeout=30)
            assert error is None, error
            assert result.get_response().id == "small"
            np.testing.assert_array_equal(result.as_numpy("ZEROS"), [1.5, 1.5, 1.5])
        finally:
            stream_client.stop_stream(cancel_requests=True)
