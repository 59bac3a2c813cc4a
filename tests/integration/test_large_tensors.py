"""Large tensors through the split wire path (service/grpc_frontend/large_messages.py).

Requests of 256 KiB and more are parsed without protobuf's copies of their tensor bytes,
and unary responses that large are written after the message's other fields. Clients
must not see any of it: every byte comes back, around the size where the path changes,
unary and streaming, over gRPC with tritonclient, for an ONNX model (its output a new
array) and a Python model (a second process between).
"""

from __future__ import annotations

import ast
import queue
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import models
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from integration_support import running_server
from server_process import ServerProcess


def _split_min_bytes() -> int:
    """The server's split size, read from its source (this environment has no server
    packages to import): the sizes below straddle it wherever it is set."""
    source = Path(__file__).parents[2] / "service" / "grpc_frontend" / "large_messages.py"
    for node in ast.parse(source.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.AnnAssign | ast.Assign):
            targets = [node.target] if isinstance(node, ast.AnnAssign) else node.targets
            if any(getattr(t, "id", "") == "SPLIT_MIN_BYTES" for t in targets):
                assert node.value is not None
                return int(eval(compile(ast.Expression(node.value), str(source), "eval")))
    raise AssertionError("SPLIT_MIN_BYTES not found")


SPLIT_MIN_BYTES = _split_min_bytes()

PY_IDENTITY = """import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            t = pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy()
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", t[::-1].copy())]))
        return out
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo: Path = tmp_path_factory.mktemp("large_repo")
    io = ([("INPUT0", "UINT8", [-1])], [("OUTPUT0", "UINT8", [-1])])
    models.write_model(
        repo, "ident", models.identity_model("UINT8", ["n"]), models.make_config("ident", *io)
    )
    (repo / "py_reverse" / "1").mkdir(parents=True)
    (repo / "py_reverse" / "1" / "model.py").write_text(PY_IDENTITY, encoding="utf-8")
    config = models.make_config("py_reverse", *io, platform="")
    (repo / "py_reverse" / "config.pbtxt").write_text(
        'backend: "python"\n' + config, encoding="utf-8"
    )
    (repo / "echo" / "1").mkdir(parents=True)  # the built-in identity: outputs are views

    def pairs(kind: str) -> str:
        return ", ".join(
            f'{{ name: "{kind}{i}" data_type: TYPE_UINT8 dims: [ -1 ] }}' for i in (0, 1)
        )

    (repo / "echo" / "config.pbtxt").write_text(
        'name: "echo"\nbackend: "identity"\nmax_batch_size: 0\n'
        f"input [ {pairs('INPUT')} ]\noutput [ {pairs('OUTPUT')} ]\n",
        encoding="utf-8",
    )
    with running_server([repo]) as running:
        yield running


SIZES = [SPLIT_MIN_BYTES - 200, SPLIT_MIN_BYTES, SPLIT_MIN_BYTES + 1, 3 << 20]


def _data(size: int) -> np.ndarray:
    return np.random.default_rng(size).integers(0, 255, size, dtype=np.uint8)


def _input(data: np.ndarray) -> list[grpcclient.InferInput]:
    tensor = grpcclient.InferInput("INPUT0", list(data.shape), "UINT8")
    tensor.set_data_from_numpy(data)
    return [tensor]


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("model", ["ident", "py_reverse"])
def test_unary_round_trips_keep_every_byte(server: ServerProcess, model: str, size: int) -> None:
    data = _data(size)
    expected = data if model == "ident" else data[::-1]
    with grpcclient.InferenceServerClient(server.url) as client:
        result = client.infer(model, _input(data), request_id=f"big-{size}")
        out: Any = result.as_numpy("OUTPUT0")
        np.testing.assert_array_equal(out, expected)
        response = result.get_response()
        assert response.id == f"big-{size}" and response.model_name == model
        assert list(response.outputs[0].shape) == [size]


def test_outputs_that_are_their_inputs_come_back_whole_and_each_its_own(
    server: ServerProcess,
) -> None:
    """The built-in identity's outputs are views of the request's input blocks, which the
    engine echoes rather than copies (decision 076): every byte comes back, to the request
    it came in, also with requests in flight together and only one output asked for."""

    def one(size: int) -> None:
        first, second = _data(size), _data(size + 1)[::-1].copy()
        inputs = _input(first) + _input(second)
        inputs[1] = grpcclient.InferInput("INPUT1", [second.size], "UINT8")
        inputs[1].set_data_from_numpy(second)
        asked = [grpcclient.InferRequestedOutput("OUTPUT1")] if size % 2 else None
        with grpcclient.InferenceServerClient(server.url) as client:
            for _ in range(3):
                result = client.infer("echo", inputs, outputs=asked)
                if asked is None:
                    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), first)
                else:
                    assert result.as_numpy("OUTPUT0") is None
                np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), second)

    sizes = [*SIZES, (1 << 20) + 1, 1 << 20]
    with ThreadPoolExecutor(len(sizes)) as pool:
        for done in [pool.submit(one, size) for size in sizes]:
            done.result(timeout=120)


def test_stream_requests_round_trip(server: ServerProcess) -> None:
    answers: queue.Queue[Any] = queue.Queue()
    with grpcclient.InferenceServerClient(server.url) as client:
        client.start_stream(callback=lambda result, error: answers.put((result, error)))
        try:
            for size in (SPLIT_MIN_BYTES + 7, 2 << 20):
                client.async_stream_infer("ident", _input(_data(size)), request_id=str(size))
            got = {}
            for _ in range(2):
                result, error = answers.get(timeout=60)
                assert error is None, error
                got[result.get_response().id] = result.as_numpy("OUTPUT0")
        finally:
            client.stop_stream()
    for size in (SPLIT_MIN_BYTES + 7, 2 << 20):
        np.testing.assert_array_equal(got[str(size)], _data(size))


def test_a_large_request_for_a_missing_input_is_refused_by_name(server: ServerProcess) -> None:
    """The split parse keeps the request's fields: the error names the model and input."""
    data = _data(SPLIT_MIN_BYTES * 2)
    tensor = grpcclient.InferInput("NOPE", [data.size], "UINT8")
    tensor.set_data_from_numpy(data)
    with (
        grpcclient.InferenceServerClient(server.url) as client,
        pytest.raises(Exception, match="ident") as caught,
    ):
        client.infer("ident", [tensor])
    assert "NOPE" in str(caught.value) or "INPUT0" in str(caught.value)
