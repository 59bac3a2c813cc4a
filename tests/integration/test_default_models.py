"""The embedded default repository, end to end: health, metadata, config and inference.

One shared server (the ``default_server`` session fixture) serves every test; each model
is exercised with the sync client, the asyncio client and both streaming APIs.
"""

from __future__ import annotations

import asyncio
import queue
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as aioclient
from integration_support import (
    IRIS_LABELS,
    IRIS_PROBABILITIES,
    IRIS_ROWS,
    add_sub_inputs,
    bytes_array,
    infer_input,
)
from server_process import ServerProcess
from tritonclient.grpc import model_config_pb2 as mc
from tritonclient.utils import InferenceServerException

MODELS = ["add_sub", "text_upper", "iris_classifier"]


@dataclass(frozen=True)
class Case:
    """One request to an embedded model and a check of its result."""

    model: str
    make_inputs: Callable[[], list[grpcclient.InferInput]]
    check: Callable[[Any], None]


def _add_sub_case(scale: float) -> Case:
    a = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], dtype=np.float32) * np.float32(scale)
    b = np.array([[10.0, 20.0, 30.0], [0.5, -1.0, 2.0]], dtype=np.float32)

    def check(result: Any) -> None:
        assert result.get_response().model_name == "add_sub"
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)

    return Case("add_sub", lambda: add_sub_inputs(a, b), check)


def _text_upper_case(words: list[str]) -> Case:
    text = bytes_array(words)
    # StringNormalizer(locale "C") upper-cases ASCII letters only.
    expected = bytes_array(["".join(c.upper() if c.isascii() else c for c in w) for w in words])

    def check(result: Any) -> None:
        assert result.get_response().model_name == "text_upper"
        upper = result.as_numpy("UPPER")
        assert upper.shape == (len(words),)
        assert list(upper) == list(expected)

    return Case("text_upper", lambda: [infer_input("TEXT", text, "BYTES")], check)


def _iris_case(rows: list[int]) -> Case:
    x = IRIS_ROWS[rows]

    def check(result: Any) -> None:
        assert result.get_response().model_name == "iris_classifier"
        labels = result.as_numpy("label")
        probabilities = result.as_numpy("probabilities")
        assert labels.dtype == np.int64 and labels.shape == (len(rows), 1)
        np.testing.assert_array_equal(labels, IRIS_LABELS[rows])
        assert probabilities.dtype == np.float32 and probabilities.shape == (len(rows), 3)
        np.testing.assert_allclose(probabilities, IRIS_PROBABILITIES[rows], atol=2e-3)
        np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, atol=1e-5)
        np.testing.assert_array_equal(probabilities.argmax(axis=1), labels[:, 0])

    return Case("iris_classifier", lambda: [infer_input("input", x, "FP32")], check)


CASES = {
    "add_sub": _add_sub_case(1.0),
    "text_upper": _text_upper_case(["hello", "World", "straße é", "mixed Case 123"]),
    "iris_classifier": _iris_case([0, 1, 2]),
}


# --- health and server metadata -------------------------------------------------------


def test_server_live_and_ready(client: grpcclient.InferenceServerClient) -> None:
    assert client.is_server_live() is True
    assert client.is_server_ready() is True


def test_server_metadata(client: grpcclient.InferenceServerClient) -> None:
    """Named "triton" as Triton is (clients and Triton's qa check it); --id changes it."""
    meta = client.get_server_metadata()
    assert meta.name == "triton"
    assert meta.version == "0.1.0"
    extensions = list(meta.extensions)
    assert extensions[:11] == [
        "classification",
        "sequence",
        "model_repository",
        "model_repository(unload_dependents)",
        "schedule_policy",
        "model_configuration",
        "system_shared_memory",
        "cuda_shared_memory",
        "binary_tensor_data",
        "parameters",
        "statistics",
    ]
    assert len(set(extensions)) == len(extensions)
    # Triton's whole list (core src/server.cc), in its order.
    triton = [*extensions[:11], "trace", "logging"]
    assert extensions == [e for e in triton if e in extensions]
    assert {"trace", "logging"} <= set(extensions)


# Triton extensions that come with RPCs of their own: advertising one whose RPC still answers
# UNIMPLEMENTED would send clients down a dead end.
EXTENSION_RPCS: dict[str, Callable[[grpcclient.InferenceServerClient], Any]] = {
    "model_configuration": lambda c: c.get_model_config("add_sub"),
    "statistics": lambda c: c.get_inference_statistics(),
    "model_repository": lambda c: c.get_model_repository_index(),
    "system_shared_memory": lambda c: c.get_system_shared_memory_status(),
    "cuda_shared_memory": lambda c: c.get_cuda_shared_memory_status(),
    "trace": lambda c: c.get_trace_settings(),
    "logging": lambda c: c.get_log_settings(),
}


def test_advertised_extensions_are_implemented(client: grpcclient.InferenceServerClient) -> None:
    """Every extension in server metadata that has an RPC must not answer UNIMPLEMENTED.

    (The extension list grows as features land, e.g. 'schedule_policy' with the dynamic
    batcher, so the list itself is not pinned here beyond 'model_configuration'.)
    """
    advertised = set(client.get_server_metadata().extensions)
    assert "model_configuration" in advertised
    for extension, call in EXTENSION_RPCS.items():
        try:
            call(client)
            implemented = True
        except InferenceServerException as error:
            implemented = error.status() != "StatusCode.UNIMPLEMENTED"
        if extension in advertised:
            assert implemented, f"'{extension}' is advertised but its RPC is UNIMPLEMENTED"


# --- model readiness, metadata, config ------------------------------------------------


@pytest.mark.parametrize("model", MODELS)
def test_model_ready(client: grpcclient.InferenceServerClient, model: str) -> None:
    assert client.is_model_ready(model) is True
    assert client.is_model_ready(model, "1") is True
    assert client.is_model_ready(model, "2") is False


EXPECTED_METADATA = {
    "add_sub": (
        [("INPUT0", "FP32", [-1, -1]), ("INPUT1", "FP32", [-1, -1])],
        [("OUTPUT0", "FP32", [-1, -1]), ("OUTPUT1", "FP32", [-1, -1])],
    ),
    "text_upper": ([("TEXT", "BYTES", [-1])], [("UPPER", "BYTES", [-1])]),
    "iris_classifier": (
        [("input", "FP32", [-1, 4])],
        [("label", "INT64", [-1, 1]), ("probabilities", "FP32", [-1, 3])],
    ),
}


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("version", ["", "1"])
def test_model_metadata(client: grpcclient.InferenceServerClient, model: str, version: str) -> None:
    meta = client.get_model_metadata(model, version)
    inputs, outputs = EXPECTED_METADATA[model]
    assert meta.name == model
    assert list(meta.versions) == ["1"]
    assert meta.platform == "onnxruntime_onnx"
    assert [(t.name, t.datatype, list(t.shape)) for t in meta.inputs] == inputs
    assert [(t.name, t.datatype, list(t.shape)) for t in meta.outputs] == outputs


def _tensors(tensors: Any) -> list[tuple[str, str, list[int], list[int] | None]]:
    return [
        (
            t.name,
            mc.DataType.Name(t.data_type),
            list(t.dims),
            list(t.reshape.shape) if t.HasField("reshape") else None,
        )
        for t in tensors
    ]


EXPECTED_CONFIG = {
    "add_sub": (
        8,
        [("INPUT0", "TYPE_FP32", [-1], None), ("INPUT1", "TYPE_FP32", [-1], None)],
        [("OUTPUT0", "TYPE_FP32", [-1], None), ("OUTPUT1", "TYPE_FP32", [-1], None)],
    ),
    "text_upper": (
        0,
        [("TEXT", "TYPE_STRING", [-1], None)],
        [("UPPER", "TYPE_STRING", [-1], None)],
    ),
    # config.pbtxt gives only platform and max_batch_size: the rest is auto-completed from
    # the ONNX signature; 'label' is [N] in the model, so Triton-style dims [1] + reshape [].
    "iris_classifier": (
        16,
        [("input", "TYPE_FP32", [4], None)],
        [("label", "TYPE_INT64", [1], []), ("probabilities", "TYPE_FP32", [3], None)],
    ),
}


@pytest.mark.parametrize("model", MODELS)
def test_model_config(client: grpcclient.InferenceServerClient, model: str) -> None:
    config = client.get_model_config(model).config
    max_batch_size, inputs, outputs = EXPECTED_CONFIG[model]
    assert config.name == model
    assert config.platform == "onnxruntime_onnx"
    assert config.backend == "onnxruntime"
    assert config.max_batch_size == max_batch_size
    assert _tensors(config.input) == inputs
    assert _tensors(config.output) == outputs
    # Without instance_group: Triton's default for ONNX Runtime on the CPU, two instances.
    count = 2 if model == "iris_classifier" else 1
    assert [(g.count, mc.ModelInstanceGroup.Kind.Name(g.kind)) for g in config.instance_group] == [
        (count, "KIND_CPU")
    ]
    assert config.default_model_filename == "model.onnx"
    # Only what config.pbtxt gives (none): loading the model reads parameters, adds none.
    assert dict(config.parameters) == {}
    # The explicit-version form answers with the same config.
    assert client.get_model_config(model, "1").config == config


# --- inference: sync, asyncio ---------------------------------------------------------


@pytest.mark.parametrize("model", MODELS)
def test_infer_sync(client: grpcclient.InferenceServerClient, model: str) -> None:
    case = CASES[model]
    result = client.infer(model, case.make_inputs())
    assert result.get_response().model_version == "1"
    case.check(result)


@pytest.mark.parametrize("model", MODELS)
async def test_infer_asyncio(default_server: ServerProcess, model: str) -> None:
    case = CASES[model]
    async with aioclient.InferenceServerClient(default_server.url) as aio:
        assert await aio.is_server_ready() is True
        assert await aio.is_model_ready(model) is True
        # Several concurrent calls on one channel, each checked on its own.
        results = await asyncio.gather(
            *(aio.infer(model, case.make_inputs(), request_id=f"aio-{i}") for i in range(4))
        )
    for i, result in enumerate(results):
        assert result.get_response().id == f"aio-{i}"
        case.check(result)


def test_infer_single_row_and_full_batch(client: grpcclient.InferenceServerClient) -> None:
    _iris_case([1]).check(client.infer("iris_classifier", _iris_case([1]).make_inputs()))
    x = np.tile(IRIS_ROWS, (6, 1))[:16]  # max_batch_size 16
    result = client.infer("iris_classifier", [infer_input("input", x, "FP32")])
    np.testing.assert_array_equal(result.as_numpy("label")[:, 0], np.tile([0, 1, 2], 6)[:16])


def test_requested_output_subset(client: grpcclient.InferenceServerClient) -> None:
    a = np.array([[1.0, 2.0, 3.0]], dtype=np.float32)
    b = np.array([[0.25, 0.5, 4.0]], dtype=np.float32)
    result = client.infer(
        "add_sub", add_sub_inputs(a, b), outputs=[grpcclient.InferRequestedOutput("OUTPUT1")]
    )
    response = result.get_response()
    assert [o.name for o in response.outputs] == ["OUTPUT1"]
    assert len(response.raw_output_contents) == 1
    assert list(response.outputs[0].shape) == [1, 3]
    assert result.as_numpy("OUTPUT0") is None
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)


def test_requested_outputs_in_request_order(client: grpcclient.InferenceServerClient) -> None:
    x = IRIS_ROWS
    result = client.infer(
        "iris_classifier",
        [infer_input("input", x, "FP32")],
        outputs=[
            grpcclient.InferRequestedOutput("probabilities"),
            grpcclient.InferRequestedOutput("label"),
        ],
    )
    assert [o.name for o in result.get_response().outputs] == ["probabilities", "label"]
    np.testing.assert_array_equal(result.as_numpy("label"), IRIS_LABELS)


def test_request_id_echoed(client: grpcclient.InferenceServerClient) -> None:
    result = client.infer(
        "text_upper",
        [infer_input("TEXT", bytes_array(["id"]), "BYTES")],
        request_id="my-request-42",
    )
    assert result.get_response().id == "my-request-42"
    assert list(result.as_numpy("UPPER")) == [b"ID"]
    # No id in, no id out.
    result = client.infer("text_upper", [infer_input("TEXT", bytes_array(["x"]), "BYTES")])
    assert result.get_response().id == ""


def test_explicit_model_version(client: grpcclient.InferenceServerClient) -> None:
    case = CASES["add_sub"]
    result = client.infer("add_sub", case.make_inputs(), model_version="1")
    response = result.get_response()
    assert (response.model_name, response.model_version) == ("add_sub", "1")
    case.check(result)


# --- streaming ------------------------------------------------------------------------


def _stream_cases() -> dict[str, Case]:
    """Nine distinct requests over the three models, keyed by request id."""
    return {
        "s-add-0": _add_sub_case(1.0),
        "s-add-1": _add_sub_case(-2.0),
        "s-add-2": _add_sub_case(100.0),
        "s-text-0": _text_upper_case(["a"]),
        "s-text-1": _text_upper_case(["stream", "Of", "words"]),
        "s-text-2": _text_upper_case(["ümlaut ok", "q"]),
        "s-iris-0": _iris_case([0]),
        "s-iris-1": _iris_case([2, 1]),
        "s-iris-2": _iris_case([1, 0, 2, 2]),
    }


def test_stream_sync_many_in_flight(default_server: ServerProcess) -> None:
    cases = _stream_cases()
    responses: queue.Queue[tuple[Any, Any]] = queue.Queue()
    with grpcclient.InferenceServerClient(default_server.url) as stream_client:
        stream_client.start_stream(callback=lambda result, error: responses.put((result, error)))
        try:
            # Everything is sent before anything is read: all nine are in flight at once.
            for request_id, case in cases.items():
                stream_client.async_stream_infer(
                    case.model, case.make_inputs(), request_id=request_id
                )
            received = {}
            for _ in cases:
                result, error = responses.get(timeout=30)
                assert error is None, error
                response = result.get_response()
                assert response.id not in received
                received[response.id] = result
        finally:
            stream_client.stop_stream()
    assert set(received) == set(cases)
    for request_id, result in received.items():
        assert result.get_response().model_name == cases[request_id].model
        assert result.get_response().model_version == "1"
        cases[request_id].check(result)
    assert responses.empty()


async def test_stream_asyncio_many_in_flight(default_server: ServerProcess) -> None:
    cases = _stream_cases()

    async def requests() -> AsyncIterator[dict[str, Any]]:
        for request_id, case in cases.items():
            yield {"model_name": case.model, "inputs": case.make_inputs(), "request_id": request_id}

    received = {}
    async with aioclient.InferenceServerClient(default_server.url) as aio:
        async for result, error in aio.stream_infer(inputs_iterator=requests()):
            assert error is None, error
            received[result.get_response().id] = result
            if len(received) == len(cases):
                break
    assert set(received) == set(cases)
    for request_id, result in received.items():
        cases[request_id].check(result)
