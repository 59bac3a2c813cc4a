"""Parameters and forwarded headers through the REST gateway: JSON parameters reach a
Python model, and --http-header-forward-pattern adds matching HTTP headers (names are
case-insensitive) as string parameters of inference requests."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator

import numpy as np
import pytest
import tritonclient.http as httpclient
from conftest import running_gateway
from gateway_process import GatewayProcess, http_request
from server_process import REPO_ROOT, SERVICE_PYTHON, ServerProcess

PARAMS_MODEL = REPO_ROOT / "tests" / "python_models" / "params"


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("params_repo")
    shutil.copytree(PARAMS_MODEL, repo / "params")
    proc = ServerProcess([repo]).start()
    yield proc
    assert proc.stop() == 0, proc.log


@pytest.fixture(scope="module")
def gateway(service: ServerProcess) -> Iterator[GatewayProcess]:
    with running_gateway(service.url, ["--http-header-forward-pattern", "MY_.*"]) as gw:
        yield gw


def _seen(
    gateway: GatewayProcess, parameters: dict[str, object], headers: dict[str, str]
) -> object:
    tensor = httpclient.InferInput("INPUT0", [1], "FP32")
    tensor.set_data_from_numpy(np.array([2.0], dtype=np.float32))
    with httpclient.InferenceServerClient(gateway.url) as client:
        result = client.infer("params", [tensor], parameters=parameters, headers=headers)
    return json.loads(result.as_numpy("PARAMS")[0])


def test_json_parameters_and_matching_headers_reach_the_model(gateway: GatewayProcess) -> None:
    headers = {"My_Header": "h1", "my_other": 'a "quoted" \\ value', "unrelated": "x"}
    seen = _seen(gateway, {"k": 1, "f": 2.5, "b": False, "s": "t"}, headers)
    assert seen == {
        "k": 1,
        "f": 2.5,
        "b": False,
        "s": "t",
        "my_header": "h1",  # HTTP names arrive lower-case
        "my_other": 'a "quoted" \\ value',
    }


def test_a_header_wins_over_a_parameter_of_the_same_name(gateway: GatewayProcess) -> None:
    assert _seen(gateway, {"my_dup": 1}, {"MY_DUP": "header"}) == {"my_dup": "header"}


def test_binary_data_output_is_the_gateway_s_own(gateway: GatewayProcess) -> None:
    """HTTP consumes binary_data_output (Triton's HTTP frontend does); it never reaches the
    model, and triton_ keys get Triton's HTTP error."""
    inputs = [{"name": "INPUT0", "shape": [1], "datatype": "FP32", "data": [1]}]
    body = {"inputs": inputs, "parameters": {"binary_data_output": False, "n": 1}}
    reply = http_request(gateway.url, "POST", "/v2/models/params/infer", body)
    assert reply.status == 200, reply
    (params,) = [o["data"][0] for o in reply.json()["outputs"] if o["name"] == "PARAMS"]
    assert json.loads(params) == {"n": 1}
    body = {"inputs": inputs, "parameters": {"triton_x": 1}}
    reply = http_request(gateway.url, "POST", "/v2/models/params/infer", body)
    assert reply.status == 400
    assert reply.error == (
        "parameter keys starting with 'triton_' are reserved for Triton usage and should "
        "not be specified."
    )


def test_without_the_flag_no_header_is_forwarded(service: ServerProcess) -> None:
    with running_gateway(service.url) as plain:
        assert _seen(plain, {"p": 1}, {"my_header": "h"}) == {"p": 1}


def test_invalid_pattern_stops_the_gateway_with_exit_code_1() -> None:
    done = subprocess.run(
        [SERVICE_PYTHON, "-m", "gateway", "--http-header-forward-pattern", "my_(x"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO_ROOT,
    )
    assert done.returncode == 1, done.stderr
    assert "--http-header-forward-pattern: invalid regular expression 'my_(x'" in done.stderr
