"""Behaviour Triton's own tests pin: decoupled models and ensembles that stream through
them, their statistics, failure reasons, the server's identity and its health answer."""

from __future__ import annotations

import queue
import shutil
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from integration_support import expect_error
from operations_support import (
    HEALTH_CHECK,
    NOT_SERVING,
    decode_health,
    encode_health,
    metrics_port,
    scrape,
)
from server_process import REPO_ROOT, LoggedProcess, ServerProcess

REPEAT_IO = """
input [
  { name: "IN" data_type: TYPE_INT32 dims: [ -1 ] },
  { name: "DELAY" data_type: TYPE_UINT32 dims: [ -1 ] },
  { name: "WAIT" data_type: TYPE_UINT32 dims: [ 1 ] }
]
"""
REPEAT = f"""name: "repeat"
backend: "repeat"
max_batch_size: 0
model_transaction_policy {{ decoupled: true }}
{REPEAT_IO}
output [
  {{ name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }},
  {{ name: "IDX" data_type: TYPE_UINT32 dims: [ 1 ] }}
]
"""
SQUARE = """name: "square"
backend: "square"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""
_REPEAT_STEP = """{
      model_name: "repeat" model_version: -1
      input_map { key: "IN" value: "IN" }
      input_map { key: "DELAY" value: "DELAY" }
      input_map { key: "WAIT" value: "WAIT" }
      output_map { key: "OUT" value: "repeat_out" }
    }"""


def _ensemble(name: str, first: str) -> str:
    """``first`` (repeat, or an ensemble around it) then square on each of its responses."""
    first_step = _REPEAT_STEP.replace('"repeat"', f'"{first}"')
    return f"""name: "{name}"
platform: "ensemble"
max_batch_size: 0
{REPEAT_IO}
output [ {{ name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }} ]
ensemble_scheduling {{
  step [
    {first_step},
    {{
      model_name: "square" model_version: -1
      input_map {{ key: "IN" value: "repeat_out" }}
      output_map {{ key: "OUT" value: "OUT" }}
    }}
  ]
}}
"""


# An ensemble around repeat alone (decoupled through its step), and a nested one.
SIMPLE_REPEAT = f"""name: "simple_repeat"
platform: "ensemble"
max_batch_size: 0
{REPEAT_IO}
output [ {{ name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }} ]
ensemble_scheduling {{ step [ {_REPEAT_STEP.replace('"repeat_out"', '"OUT"')} ] }}
"""

# A python model that builds an empty BYTES output as mock_llm of Triton's generate tests
# does: np.array([]), which numpy types float64.
EMPTY_TEXT = """name: "empty_text"
backend: "python"
max_batch_size: 0
input [ { name: "PROMPT" data_type: TYPE_STRING dims: [ 1 ] } ]
output [ { name: "TEXT" data_type: TYPE_STRING dims: [ -1 ] } ]
"""
EMPTY_TEXT_MODEL = """import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("TEXT", np.array([]))])
                for _ in requests]
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("fidelity_repo")
    configs = {
        "repeat": REPEAT,
        "square": SQUARE,
        "repeat_square": _ensemble("repeat_square", "repeat"),
        "simple_repeat": SIMPLE_REPEAT,
        "nested_square": _ensemble("nested_square", "simple_repeat"),
        "broken": 'name: "broken"\nbackend: "no_such_backend"\nmax_batch_size: 0\n',
        "empty_text": EMPTY_TEXT,
    }
    for name, text in configs.items():
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "config.pbtxt").write_text(text)
    (repo / "empty_text" / "1" / "model.py").write_text(EMPTY_TEXT_MODEL)
    shutil.copytree(REPO_ROOT / "tests" / "python_models" / "faulty", repo / "faulty")
    proc = ServerProcess(
        [repo], extra_args=["--id", "fidelity-test", "--exit-on-error=false"]
    ).start()
    yield proc
    assert proc.stop() == 0, proc.log


def _repeat_inputs(values: list[int]) -> list[grpcclient.InferInput]:
    arrays = {
        "IN": np.array(values, dtype=np.int32),
        "DELAY": np.zeros(len(values), dtype=np.uint32),
        "WAIT": np.array([0], dtype=np.uint32),
    }
    inputs = []
    for name, array in arrays.items():
        tensor = grpcclient.InferInput(
            name, list(array.shape), "INT32" if name == "IN" else "UINT32"
        )
        tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    return inputs


def _stream(url: str, model: str, inputs: list[grpcclient.InferInput]) -> list[tuple[int, bool]]:
    """(OUT or None, final flag) of every response of one request, up to its final one."""
    results: queue.Queue[tuple[Any, Any]] = queue.Queue()
    out: list[tuple[Any, bool]] = []
    with grpcclient.InferenceServerClient(url) as client:
        client.start_stream(callback=lambda result, error: results.put((result, error)))
        client.async_stream_infer(model, inputs, request_id="f1", enable_empty_final_response=True)
        while not out or not out[-1][1]:
            result, error = results.get(timeout=30)
            assert error is None, error
            response = result.get_response()
            assert response.id == "f1"
            value = int(result.as_numpy("OUT")[0]) if response.outputs else None
            out.append((value, response.parameters["triton_final_response"].bool_param))
        client.stop_stream()
    return out


# --------------------------------------------------------------------------- identity, health


def test_id_flag_names_the_server(server: ServerProcess) -> None:
    with grpcclient.InferenceServerClient(server.url) as client:
        assert client.get_server_metadata().name == "fidelity-test"


def test_health_check_answers_readiness_for_every_service_name(server: ServerProcess) -> None:
    """A model failed to load, so with strict readiness the server is not ready: Triton's
    health Check says NOT_SERVING whatever the service name ("" included); live stays true."""
    with grpc.insecure_channel(server.url) as channel:
        check = channel.unary_unary(HEALTH_CHECK)
        for service in ("", "inference.GRPCInferenceService", "anything.Else"):
            assert decode_health(check(encode_health(service), timeout=5)) == NOT_SERVING
    with grpcclient.InferenceServerClient(server.url) as client:
        assert client.is_server_live() and not client.is_server_ready()


# --------------------------------------------------------------------------- decoupled


@pytest.mark.parametrize("model", ["repeat", "square", "repeat_square", "nested_square"])
def test_unary_infer_on_a_decoupled_model_is_refused(server: ServerProcess, model: str) -> None:
    """As Triton's ModelInfer: UNIMPLEMENTED, never an answer that happens to be single.
    An ensemble with a decoupled step is decoupled too (its config says so)."""
    inputs = [grpcclient.InferInput("IN", [1], "INT32").set_data_from_numpy(np.array([1], "i4"))]
    if model != "square":
        inputs = _repeat_inputs([1])
    with grpcclient.InferenceServerClient(server.url) as client:
        expect_error(
            lambda: client.infer(model, inputs),
            "UNIMPLEMENTED",
            "ModelInfer RPC doesn't support models with decoupled transaction policy",
        )
        config = client.get_model_config(model, as_json=True)["config"]
        assert config["model_transaction_policy"]["decoupled"] is True


def test_ensemble_streams_every_response_of_its_decoupled_steps(server: ServerProcess) -> None:
    """repeat sends 1, 2, 3; square answers n with n responses: 6 responses, then the final
    flag (repeat ends with a flags-only final, so the ensemble's final carries no data)."""
    responses = _stream(server.url, "repeat_square", _repeat_inputs([1, 2, 3]))
    values = [v for v, _ in responses if v is not None]
    assert sorted(values) == [1, 2, 2, 3, 3, 3]
    assert responses[-1] == (None, True)
    assert [final for _, final in responses[:-1]] == [False] * 6


def test_nested_ensemble_streams_through_both_levels(server: ServerProcess) -> None:
    responses = _stream(server.url, "nested_square", _repeat_inputs([2, 1]))
    assert sorted(v for v, _ in responses if v is not None) == [1, 2, 2]
    assert responses[-1] == (None, True)


def test_ensemble_with_no_response_sends_only_the_final_flag(server: ServerProcess) -> None:
    for model in ("simple_repeat", "repeat_square", "nested_square"):
        assert _stream(server.url, model, _repeat_inputs([])) == [(None, True)]


def test_decoupled_requests_record_queue_and_compute_statistics(server: ServerProcess) -> None:
    """Like any model's (perf_analyzer profiles decoupled models from these counters)."""
    with grpcclient.InferenceServerClient(server.url) as client:
        before = client.get_inference_statistics("square").model_stats[0].inference_stats
        square_in = grpcclient.InferInput("IN", [1], "INT32")
        square_in.set_data_from_numpy(np.array([2], dtype=np.int32))
        assert len(_stream(server.url, "square", [square_in])) == 3
        stats = client.get_inference_statistics("square").model_stats[0]
        after = stats.inference_stats
        for field in ("success", "queue", "compute_input", "compute_infer", "compute_output"):
            assert getattr(after, field).count - getattr(before, field).count == 1, field
        assert after.compute_infer.ns > before.compute_infer.ns
        assert stats.execution_count >= 1


# --------------------------------------------------------------------------- failure reasons


def test_empty_output_built_as_float64_is_the_declared_bytes(server: ServerProcess) -> None:
    """An output with no elements has no type to disagree with the config: Triton's
    python backend sends it, and so do we (as BYTES of shape [0])."""
    prompt = grpcclient.InferInput("PROMPT", [1], "BYTES")
    prompt.set_data_from_numpy(np.array([b"hello"], dtype=np.object_))
    with grpcclient.InferenceServerClient(server.url) as client:
        result = client.infer("empty_text", [prompt])
    out = result.get_output("TEXT")
    assert out.datatype == "BYTES" and list(out.shape) == [0]
    assert result.as_numpy("TEXT").size == 0


def _failures(server: ServerProcess, model: str) -> dict[str, int]:
    samples = scrape(metrics_port(server))
    prefix = "nv_inference_request_failure:"
    return {
        name.removeprefix(prefix): int(value)
        for (name, m, _), value in samples.items()
        if m == model and name.startswith(prefix)
    }


def test_failure_metric_has_triton_reasons(server: ServerProcess) -> None:
    """Every failure lands in exactly one reason: a model whose execute fails a request is
    BACKEND; a request refused before the model saw it (bad input) is no failure at all;
    a model's own error response is a success, as Triton 2.51 counts it (decision 038)."""
    before = _failures(server, "faulty")
    assert set(before) == {"REJECTED", "CANCELED", "BACKEND", "OTHER"}

    def mode(value: int, dtype: type = np.int32) -> grpcclient.InferInput:
        tensor = grpcclient.InferInput("MODE", [1, 1], "INT32" if dtype is np.int32 else "FP32")
        tensor.set_data_from_numpy(np.array([[value]], dtype=dtype))
        return tensor

    with grpcclient.InferenceServerClient(server.url) as client:
        successes = client.get_inference_statistics("faulty").model_stats[0].inference_stats
        before_success = successes.success.count
        expect_error(lambda: client.infer("faulty", [mode(1)]), "INTERNAL", contains=["MODE 1"])
        expect_error(lambda: client.infer("faulty", [mode(2)]), "INTERNAL", "MODE 2 is refused")
        expect_error(lambda: client.infer("faulty", [mode(2, np.float32)]), "INVALID_ARGUMENT")
        stats = client.get_inference_statistics("faulty").model_stats[0].inference_stats
        fail = stats.fail
        assert stats.success.count == before_success + 1  # the error response
    after = _failures(server, "faulty")
    assert {r: after[r] - before[r] for r in after} == {
        "REJECTED": 0,
        "CANCELED": 0,
        "BACKEND": 1,
        "OTHER": 0,
    }
    assert fail.count == sum(after.values())


# --------------------------------------------------------------------------- a new user's start


def test_serve_script_serves_only_the_repository_it_is_given(tmp_path: Path) -> None:
    """scripts/serve.sh --model-repository DIR serves DIR alone (the embedded repository
    only when none is given) and logs Triton's model table before the endpoints."""
    shutil.copytree(REPO_ROOT / "tests" / "python_models" / "add_sub", tmp_path / "add_sub")
    args = ["bash", str(REPO_ROOT / "scripts" / "serve.sh"), "--model-repository", str(tmp_path)]
    args += ["--grpc-address", "127.0.0.1", "--grpc-port", "0"]
    args += ["--metrics-address", "127.0.0.1", "--metrics-port", "0"]
    with LoggedProcess(args, env={"SERVE_GATEWAY": "0"}) as proc:
        with grpcclient.InferenceServerClient(proc.url) as client:
            index = client.get_model_repository_index(as_json=True)["models"]
        assert [m["name"] for m in index] == ["add_sub"]
        table = proc.log[proc.log.index("+-----") : proc.log.index("Started GRPCInferenceService")]
        assert "| Model   | Version | Status |" in table
        assert "| add_sub | 1       | READY  |" in table
        assert proc.stop() == 0


@pytest.mark.parametrize(
    ("family", "host", "address"),
    [
        (socket.AF_INET, "127.0.0.1", "127.0.0.1"),
        (socket.AF_INET6, "::1", "[::1]"),  # grpc's form of an IPv6 address
    ],
)
def test_a_port_in_use_stops_the_start_with_one_line(
    tmp_path: Path, family: socket.AddressFamily, host: str, address: str
) -> None:
    with socket.socket(family) as taken:
        try:
            taken.bind((host, 0))
        except OSError:
            pytest.skip(f"no {host} on this machine")
        taken.listen()
        port = taken.getsockname()[1]
        args = ["--grpc-address", address, "--grpc-port", str(port)]
        server = ServerProcess([tmp_path], extra_args=args)
        with pytest.raises(RuntimeError, match="server exited with 1"):
            server.start()
    # One line, ours: grpc's own "Failed to add port" never shows.
    errors = [line for line in server.log.splitlines() if line.startswith("E")]
    assert len(errors) == 1, server.log
    assert errors[0].endswith(
        f"failed to start GRPC service: Socket '{address}:{port}' already in use"
    )
