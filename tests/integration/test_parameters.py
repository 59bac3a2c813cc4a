"""Request parameters reach Python models as Triton's python backend gives them (a compact
JSON string), ensembles pass them to every step, and --grpc-header-forward-pattern turns
matching gRPC metadata into string parameters (case-insensitive unless ``(?-i)``)."""

from __future__ import annotations

import json
import queue
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from integration_support import expect_rpc_error, grpc_stub, raw_tensor, running_server
from server_process import REPO_ROOT, SERVICE_PYTHON, ServerProcess
from tritonclient.grpc import service_pb2

PARAMS_MODEL = REPO_ROOT / "tests" / "python_models" / "params"

ENSEMBLE = """name: "params_pipeline"
platform: "ensemble"
max_batch_size: 0
input [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [
  { name: "FIRST" data_type: TYPE_STRING dims: [ 1 ] },
  { name: "SECOND" data_type: TYPE_STRING dims: [ 1 ] }
]
ensemble_scheduling { step [
  { model_name: "params" model_version: -1
    input_map { key: "INPUT0" value: "X" }
    output_map [ { key: "OUTPUT0" value: "MID" }, { key: "PARAMS" value: "FIRST" } ] },
  { model_name: "params" model_version: -1
    input_map { key: "INPUT0" value: "MID" }
    output_map { key: "PARAMS" value: "SECOND" } }
] }
"""


def make_repository(root: Path) -> Path:
    shutil.copytree(PARAMS_MODEL, root / "params")
    (root / "params_pipeline" / "1").mkdir(parents=True)
    (root / "params_pipeline" / "config.pbtxt").write_text(ENSEMBLE)
    return root


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_repository(tmp_path_factory.mktemp("params_repo"))


@pytest.fixture(scope="module")
def server(repository: Path) -> Iterator[ServerProcess]:
    with running_server([repository], ["--grpc-header-forward-pattern", "MY_.*"]) as proc:
        yield proc


@pytest.fixture(scope="module")
def client(server: ServerProcess) -> Iterator[grpcclient.InferenceServerClient]:
    with grpcclient.InferenceServerClient(server.url) as c:
        yield c


def _inputs(name: str = "INPUT0") -> list[grpcclient.InferInput]:
    tensor = grpcclient.InferInput(name, [1], "FP32")
    tensor.set_data_from_numpy(np.array([1.5], dtype=np.float32))
    return [tensor]


def _seen(result: Any, output: str = "PARAMS") -> str:
    raw = result.as_numpy(output)[0]
    return raw.decode("utf-8") if isinstance(raw, bytes) else str(raw)


PARAMETERS = {"text": 'värde "q"', "count": 7, "ratio": 0.25, "flag": True}


def test_python_model_sees_every_parameter_as_compact_json(
    client: grpcclient.InferenceServerClient,
) -> None:
    result = client.infer("params", _inputs(), parameters=PARAMETERS)
    raw = _seen(result)
    assert json.loads(raw) == PARAMETERS
    assert ", " not in raw and '": ' not in raw and "\\u" not in raw  # as rapidjson writes it


def test_parameters_the_server_consumes_do_not_reach_the_model(
    client: grpcclient.InferenceServerClient,
) -> None:
    result = client.infer(
        "params", _inputs(), parameters={"kept": 1}, priority=1, timeout=10_000_000
    )
    assert json.loads(_seen(result)) == {"kept": 1}
    assert json.loads(_seen(client.infer("params", _inputs()))) == {}


def test_request_timeout_is_the_clients_timeout_parameter(
    client: grpcclient.InferenceServerClient,
) -> None:
    """``request.timeout()``: microseconds, 0 when none was given (checked on Triton 2.51)."""
    result = client.infer("params", _inputs(), timeout=5_000_000)
    assert result.as_numpy("TIMEOUT").tolist() == [5_000_000]
    assert client.infer("params", _inputs()).as_numpy("TIMEOUT").tolist() == [0]


def test_reserved_triton_prefix_is_refused_with_triton_text(server: ServerProcess) -> None:
    """tritonclient refuses such keys itself, so a raw stub sends them."""

    def infer(key: str, value: Any) -> None:
        request = service_pb2.ModelInferRequest(
            model_name="params", inputs=[raw_tensor("INPUT0", "FP32", [1], fp32_contents=[1])]
        )
        setattr(request.parameters[key], value[0], value[1])
        with grpc_stub(server.url) as stub:
            stub.ModelInfer(request)

    expect_rpc_error(
        lambda: infer("triton_x", ("bool_param", True)),
        grpc.StatusCode.INVALID_ARGUMENT,
        "parameter keys starting with 'triton_' are reserved for Triton usage. Only the "
        "following keys starting with 'triton_' are allowed: triton_enable_empty_final_response",
    )
    expect_rpc_error(
        lambda: infer("triton_enable_empty_final_response", ("string_param", "yes")),
        grpc.StatusCode.INVALID_ARGUMENT,
        "invalid value type for 'triton_enable_empty_final_response' parameter, expected "
        "bool_param.",
    )


def test_matching_metadata_becomes_a_string_parameter(
    client: grpcclient.InferenceServerClient,
) -> None:
    """Pattern MY_.* matches the (always lower-case) key my_h: case-insensitive by default.
    A header wins over an explicit parameter of the same name, as the later entry does in
    Triton's list; metadata that does not match stays out."""
    headers = {"my_h": "header value", "my_dup": "from header", "other": "x"}
    result = client.infer("params", _inputs(), parameters={"my_dup": 5, "p": "q"}, headers=headers)
    assert json.loads(_seen(result)) == {"p": "q", "my_h": "header value", "my_dup": "from header"}


def test_stream_metadata_applies_to_every_request_of_the_stream(server: ServerProcess) -> None:
    results: queue.Queue[tuple[Any, Any]] = queue.Queue()
    with grpcclient.InferenceServerClient(server.url) as client:
        client.start_stream(
            callback=lambda result, error: results.put((result, error)), headers={"my_s": "1"}
        )
        for n in range(3):
            client.async_stream_infer("params", _inputs(), parameters={"n": n})
        seen = []
        for _ in range(3):
            result, error = results.get(timeout=30)
            assert error is None, error
            seen.append(json.loads(_seen(result)))
        client.stop_stream()
    assert sorted(seen, key=lambda s: s["n"]) == [{"n": n, "my_s": "1"} for n in range(3)]


def test_ensemble_passes_parameters_and_headers_to_every_step(
    client: grpcclient.InferenceServerClient,
) -> None:
    result = client.infer(
        "params_pipeline", _inputs("X"), parameters={"a": "b", "n": 3}, headers={"my_e": "e"}
    )
    expected = {"a": "b", "n": 3, "my_e": "e"}
    assert json.loads(_seen(result, "FIRST")) == expected
    assert json.loads(_seen(result, "SECOND")) == expected


def test_case_sensitive_pattern_does_not_match_lower_case_metadata(repository: Path) -> None:
    """(?-i) after Triton's (?i) prefix makes the match case-sensitive; gRPC metadata keys
    are lower-case, so MY_.* no longer matches while my_.* does."""
    args = ["--grpc-header-forward-pattern", "(?-i)MY_.*|(?-i)low_.*"]
    with (
        running_server([repository], args) as proc,
        grpcclient.InferenceServerClient(proc.url) as client,
    ):
        result = client.infer("params", _inputs(), headers={"my_h": "v", "low_h": "w"})
        assert json.loads(_seen(result)) == {"low_h": "w"}


def test_invalid_pattern_stops_the_start_with_exit_code_1(repository: Path) -> None:
    done = subprocess.run(
        [
            SERVICE_PYTHON,
            "-m",
            "service",
            "--model-repository",
            str(repository),
            "--grpc-port",
            "0",
            "--grpc-header-forward-pattern",
            "my_(header",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO_ROOT,
    )
    assert done.returncode == 1, done.stderr
    assert "--grpc-header-forward-pattern: invalid regular expression 'my_(header'" in done.stderr
