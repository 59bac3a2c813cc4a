"""tritonclient.http (sync and asyncio) through the gateway, for every embedded model.

Each model is run in JSON mode (``binary_data=False`` on inputs and outputs) and in
binary mode (the binary tensor extension), with and without compression, and the
answers are checked against what the model computes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient
import tritonclient.http.aio as aiohttpclient
from gateway_process import GatewayProcess
from tritonclient.utils import InferenceServerException

Case = tuple[list[tuple[str, np.ndarray, str]], list[str], Callable[[dict[str, np.ndarray]], None]]

IRIS = np.array([[5.1, 3.5, 1.4, 0.2], [6.7, 3.0, 5.2, 2.3], [5.9, 3.0, 4.2, 1.5]], np.float32)


def _add_sub() -> Case:
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    b = np.full((1, 16), 0.5, dtype=np.float32)

    def check(out: dict[str, np.ndarray]) -> None:
        np.testing.assert_array_equal(out["OUTPUT0"], a + b)
        np.testing.assert_array_equal(out["OUTPUT1"], a - b)

    return [("INPUT0", a, "FP32"), ("INPUT1", b, "FP32")], ["OUTPUT0", "OUTPUT1"], check


def _text_upper() -> Case:
    text = np.array(["hello", "Straße é", "", "x" * 300], dtype=object)

    def check(out: dict[str, np.ndarray]) -> None:
        got = [v.decode("utf-8") if isinstance(v, bytes) else v for v in out["UPPER"]]
        assert got == ["HELLO", "STRAßE é", "", "X" * 300]  # the model upper-cases ASCII only

    return [("TEXT", text, "BYTES")], ["UPPER"], check


def _iris() -> Case:
    def check(out: dict[str, np.ndarray]) -> None:
        assert out["label"].ravel().tolist() == [0, 2, 1]
        assert out["probabilities"].shape == (3, 3)
        np.testing.assert_allclose(out["probabilities"].sum(axis=1), 1.0, rtol=1e-5)

    return [("input", IRIS, "FP32")], ["label", "probabilities"], check


CASES: dict[str, Callable[[], Case]] = {
    "add_sub": _add_sub,
    "text_upper": _text_upper,
    "iris_classifier": _iris,
}


def _inputs(module: Any, case: Case, binary: bool) -> tuple[list[Any], list[Any]]:
    tensors, outputs, _ = case
    inputs = []
    for name, array, datatype in tensors:
        tensor = module.InferInput(name, list(array.shape), datatype)
        tensor.set_data_from_numpy(array, binary_data=binary)
        inputs.append(tensor)
    requested = [module.InferRequestedOutput(name, binary_data=binary) for name in outputs]
    return inputs, requested


@pytest.fixture(scope="module")
def client(gateway: GatewayProcess) -> Iterator[httpclient.InferenceServerClient]:
    c = httpclient.InferenceServerClient(gateway.url)
    yield c
    c.close()


@pytest.mark.parametrize("binary", [False, True], ids=["json", "binary"])
@pytest.mark.parametrize("model", list(CASES))
def test_sync_infer(client: httpclient.InferenceServerClient, model: str, binary: bool) -> None:
    case = CASES[model]()
    inputs, outputs = _inputs(httpclient, case, binary)
    result = client.infer(model, inputs, outputs=outputs, request_id=f"{model}-1")
    response = result.get_response()
    assert response["model_name"] == model
    assert response["model_version"] == "1"
    assert response["id"] == f"{model}-1"
    for out in response["outputs"]:
        assert ("data" in out) is not binary
        assert ("binary_data_size" in out.get("parameters", {})) is binary
    case[2]({name: result.as_numpy(name) for name in case[1]})


@pytest.mark.parametrize("binary", [False, True], ids=["json", "binary"])
@pytest.mark.parametrize("model", list(CASES))
async def test_aio_infer(gateway: GatewayProcess, model: str, binary: bool) -> None:
    case = CASES[model]()
    inputs, outputs = _inputs(aiohttpclient, case, binary)
    async with aiohttpclient.InferenceServerClient(gateway.url) as client:
        result = await client.infer(model, inputs, outputs=outputs)
    case[2]({name: result.as_numpy(name) for name in case[1]})


@pytest.mark.parametrize("model", list(CASES))
def test_all_outputs_binary_by_default(
    client: httpclient.InferenceServerClient, model: str
) -> None:
    """No outputs named: tritonclient asks binary_data_output, every output comes back."""
    case = CASES[model]()
    inputs, _ = _inputs(httpclient, case, binary=True)
    result = client.infer(model, inputs)
    assert sorted(o["name"] for o in result.get_response()["outputs"]) == sorted(case[1])
    case[2]({name: result.as_numpy(name) for name in case[1]})


@pytest.mark.parametrize("request_alg", [None, "gzip", "deflate"])
@pytest.mark.parametrize("response_alg", [None, "gzip", "deflate"])
def test_compression(
    client: httpclient.InferenceServerClient, request_alg: str | None, response_alg: str | None
) -> None:
    case = _add_sub()
    inputs, outputs = _inputs(httpclient, case, binary=True)
    result = client.infer(
        "add_sub",
        inputs,
        outputs=outputs,
        request_compression_algorithm=request_alg,
        response_compression_algorithm=response_alg,
    )
    case[2]({name: result.as_numpy(name) for name in case[1]})


def test_mixed_json_and_binary_inputs(client: httpclient.InferenceServerClient) -> None:
    tensors, _, check = _add_sub()
    inputs = []
    for (name, array, datatype), binary in zip(tensors, (True, False), strict=True):
        tensor = httpclient.InferInput(name, list(array.shape), datatype)
        tensor.set_data_from_numpy(array, binary_data=binary)
        inputs.append(tensor)
    outputs = [
        httpclient.InferRequestedOutput("OUTPUT0", binary_data=True),
        httpclient.InferRequestedOutput("OUTPUT1", binary_data=False),
    ]
    result = client.infer("add_sub", inputs, outputs=outputs)
    kinds = {o["name"]: "data" in o for o in result.get_response()["outputs"]}
    assert kinds == {"OUTPUT0": False, "OUTPUT1": True}
    check({name: result.as_numpy(name) for name in ("OUTPUT0", "OUTPUT1")})


def test_one_requested_output_and_version(client: httpclient.InferenceServerClient) -> None:
    tensors, _, _ = _add_sub()
    inputs, _ = _inputs(httpclient, (tensors, [], lambda _: None), binary=False)
    outputs = [httpclient.InferRequestedOutput("OUTPUT1", binary_data=False)]
    result = client.infer("add_sub", inputs, model_version="1", outputs=outputs)
    assert [o["name"] for o in result.get_response()["outputs"]] == ["OUTPUT1"]
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), tensors[0][1] - tensors[1][1])


def test_errors_raise_with_the_service_message(client: httpclient.InferenceServerClient) -> None:
    a = np.zeros((1, 4), np.float32)
    tensor = httpclient.InferInput("INPUT0", [1, 4], "FP32")
    tensor.set_data_from_numpy(a)
    with pytest.raises(InferenceServerException, match="unknown model") as info:
        client.infer("no_such_model", [tensor])
    assert info.value.status() == "404"
    with pytest.raises(InferenceServerException, match="expected 2 inputs"):
        client.infer("add_sub", [tensor])
    outputs = [httpclient.InferRequestedOutput("probabilities", class_count=-1)]
    iris = httpclient.InferInput("input", [3, 4], "FP32")
    iris.set_data_from_numpy(IRIS)
    with pytest.raises(InferenceServerException, match="Unable to set 'classification'"):
        client.infer("iris_classifier", [iris], outputs=outputs)
    # A valid count: the top classes per row, "value:index" (iris has no label file).
    outputs = [httpclient.InferRequestedOutput("probabilities", class_count=2)]
    top = client.infer("iris_classifier", [iris], outputs=outputs).as_numpy("probabilities")
    assert top.shape == (3, 2)
    assert all(len(entry.split(b":")) == 2 for entry in top.reshape(-1))


def test_health_and_metadata(client: httpclient.InferenceServerClient) -> None:
    assert client.is_server_live()
    assert client.is_server_ready()
    assert client.is_model_ready("add_sub")
    assert client.is_model_ready("add_sub", "1")
    assert not client.is_model_ready("no_such_model")
    meta = client.get_server_metadata()
    assert {"name", "version", "extensions"} <= set(meta)
    model = client.get_model_metadata("text_upper", "1")
    assert model["inputs"] == [{"name": "TEXT", "datatype": "BYTES", "shape": [-1]}]
    config = client.get_model_config("iris_classifier")
    assert config["name"] == "iris_classifier"
    assert config["max_batch_size"] == 16
    assert {i["name"] for i in config["input"]} == {"input"}


def test_statistics_count_gateway_requests(client: httpclient.InferenceServerClient) -> None:
    before = client.get_inference_statistics("text_upper")["model_stats"][0]
    case = _text_upper()
    inputs, outputs = _inputs(httpclient, case, binary=False)
    client.infer("text_upper", inputs, outputs=outputs)
    after = client.get_inference_statistics("text_upper", "1")["model_stats"][0]
    assert after["inference_count"] == before["inference_count"] + 1
    assert (
        after["inference_stats"]["success"]["count"]
        == before["inference_stats"]["success"]["count"] + 1
    )
    everything = client.get_inference_statistics()["model_stats"]
    assert {s["name"] for s in everything} >= set(CASES)


def test_repository_index(client: httpclient.InferenceServerClient) -> None:
    index = client.get_model_repository_index()
    states = {e["name"]: e["state"] for e in index}
    assert set(CASES) <= set(states)  # the default repository may hold more models
    assert set(states.values()) == {"READY"}
    assert all(e["version"] == "1" for e in index)
    assert all("reason" not in e for e in index)


async def test_aio_metadata_and_health(gateway: GatewayProcess) -> None:
    async with aiohttpclient.InferenceServerClient(gateway.url) as client:
        assert await client.is_server_live()
        assert await client.is_model_ready("iris_classifier")
        meta = await client.get_model_metadata("add_sub")
        assert [i["name"] for i in meta["inputs"]] == ["INPUT0", "INPUT1"]
        stats = await client.get_inference_statistics("add_sub")
        assert stats["model_stats"][0]["name"] == "add_sub"


@pytest.mark.parametrize("algorithm", ["gzip", "deflate"])
def test_large_compressed_tensors(client: httpclient.InferenceServerClient, algorithm: str) -> None:
    """Bodies above 256 KiB are inflated and compressed off the event loop."""
    a = np.random.default_rng(1).standard_normal((4, 50_000)).astype(np.float32)
    b = np.ones_like(a)
    inputs = [
        httpclient.InferInput("INPUT0", list(a.shape), "FP32"),
        httpclient.InferInput("INPUT1", list(b.shape), "FP32"),
    ]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    result = client.infer(
        "add_sub",
        inputs,
        request_compression_algorithm=algorithm,
        response_compression_algorithm=algorithm,
    )
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
