"""What a client reads when a Python model's own code fails: Triton's stub's texts.

Each expected text below was read from the reference Triton 2.51 (its python backend) with
the same model files: a load that fails reads ``Internal: Type: message`` and ``At:``
with the model's frames, innermost first (pybind11's ``error_already_set`` text); an
execute that raises reads ``Failed to process the request(s) for model '<instance>',
message: `` and the same form; a check of the stub's own (the number of responses) is its
message alone; a model file imports its neighbours relatively, its version folder being a
package."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from integration_support import running_server
from replica_cluster import GatewayProcess
from tritonclient.utils import InferenceServerException

_CONFIG = """name: "{name}"
backend: "python"
max_batch_size: 0
input [ {{ name: "INPUT0" data_type: TYPE_UINT8 dims: [ -1 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_UINT8 dims: [ -1 ] }} ]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
"""

_HEAD = "import triton_python_backend_utils as pb_utils\n"

_MODELS = {
    "init_nested": """
def helper():
    raise ValueError("bad init value")
class TritonPythonModel:
    def initialize(self, args):
        helper()
    def execute(self, requests):
        return []
""",
    "autocomplete_raises": """
class TritonPythonModel:
    @staticmethod
    def auto_complete_config(cfg):
        raise KeyError("ac")
    def execute(self, requests):
        return []
""",
    "exec_nested": """
def helper(x):
    raise RuntimeError("boom " + str(x))
class TritonPythonModel:
    def execute(self, requests):
        return [helper(1)]
""",
    "exec_count": """
class TritonPythonModel:
    def execute(self, requests):
        return []
""",
    "exec_tme": """
class TritonPythonModel:
    def execute(self, requests):
        raise pb_utils.TritonModelException("tme said")
""",
    "exec_async": """
import asyncio
class TritonPythonModel:
    async def execute(self, requests):
        await asyncio.sleep(0)
        raise ValueError("async bad")
""",
    "exec_noargs": """
class TritonPythonModel:
    def execute(self, requests):
        raise ValueError()
""",
    "no_execute": """
class TritonPythonModel:
    def initialize(self, args):
        pass
""",
    "never_loaded": """
class TritonPythonModel:
    def execute(self, requests):
        return []
""",
    "rel_import": """
import numpy as np
from .helpers import VALUE
class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            x = pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy()
            tensor = pb_utils.Tensor("OUTPUT0", (x + VALUE).astype(np.uint8))
            out.append(pb_utils.InferenceResponse([tensor]))
        return out
""",
}


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("python_errors")
    for name, source in _MODELS.items():
        (root / name / "1").mkdir(parents=True)
        (root / name / "config.pbtxt").write_text(_CONFIG.format(name=name))
        (root / name / "1" / "model.py").write_text(_HEAD + source)
    (root / "rel_import" / "1" / "helpers.py").write_text("VALUE = 7\n")
    return root


@pytest.fixture(scope="module")
def urls(repo: Path) -> Iterator[tuple[str, str]]:
    with (
        running_server([repo], ["--model-control-mode", "explicit"]) as server,
        GatewayProcess(server.url) as gateway,
    ):
        yield server.url, gateway.url


def _model_file(repo: Path, name: str) -> str:
    return str(repo / name / "1" / "model.py")


def _load_error(url: str, name: str) -> str:
    with (
        grpcclient.InferenceServerClient(url) as client,
        pytest.raises(InferenceServerException) as caught,
    ):
        client.load_model(name)
    assert caught.value.status() == "StatusCode.INVALID_ARGUMENT"
    return caught.value.message()


def _infer_errors(urls: tuple[str, str], name: str) -> list[str]:
    """The message of the same failing request over gRPC and over HTTP."""
    grpc_url, http_url = urls
    with grpcclient.InferenceServerClient(grpc_url) as client:
        client.load_model(name)
        tensor = grpcclient.InferInput("INPUT0", [3], "UINT8")
        tensor.set_data_from_numpy(np.ones(3, np.uint8))
        with pytest.raises(InferenceServerException) as grpc_caught:
            client.infer(name, [tensor])
    assert grpc_caught.value.status() == "StatusCode.INTERNAL"
    with httpclient.InferenceServerClient(http_url) as client:
        tensor = httpclient.InferInput("INPUT0", [3], "UINT8")
        tensor.set_data_from_numpy(np.ones(3, np.uint8))
        with pytest.raises(InferenceServerException) as http_caught:
            client.infer(name, [tensor])
    assert http_caught.value.status() == "500"
    return [grpc_caught.value.message(), http_caught.value.message()]


def test_a_failing_initialize_reads_as_the_stubs_traceback(
    urls: tuple[str, str], repo: Path
) -> None:
    path = _model_file(repo, "init_nested")
    reason = (
        "Internal: ValueError: bad init value\n\nAt:\n"
        f"  {path}(4): helper\n  {path}(7): initialize\n"
    )
    assert _load_error(urls[0], "init_nested") == (
        f"load failed for model 'init_nested': version 1 is at UNAVAILABLE state: {reason};\n"
    )
    with httpclient.InferenceServerClient(urls[1]) as client:
        index = {e["name"]: e for e in client.get_model_repository_index()}
    assert index["init_nested"] == {
        "name": "init_nested",
        "version": "1",
        "state": "UNAVAILABLE",
        "reason": reason,
    }
    assert index["never_loaded"] == {"name": "never_loaded"}  # Triton's name-only entry


def test_a_failing_auto_complete_config_reads_the_same(urls: tuple[str, str], repo: Path) -> None:
    path = _model_file(repo, "autocomplete_raises")
    assert _load_error(urls[0], "autocomplete_raises") == (
        "load failed for model 'autocomplete_raises': version 1 is at UNAVAILABLE state: "
        f"Internal: KeyError: 'ac'\n\nAt:\n  {path}(6): auto_complete_config\n;\n"
    )


def test_an_execute_that_raises_lists_the_models_frames(urls: tuple[str, str], repo: Path) -> None:
    path = _model_file(repo, "exec_nested")
    expected = (
        "Failed to process the request(s) for model 'exec_nested_0_0', message: "
        f"RuntimeError: boom 1\n\nAt:\n  {path}(4): helper\n  {path}(7): execute\n"
    )
    assert _infer_errors(urls, "exec_nested") == [expected, expected]


@pytest.mark.parametrize(
    ("name", "described", "line"),
    [
        ("exec_tme", "TritonModelException: tme said", 5),
        ("exec_noargs", "ValueError: <EMPTY MESSAGE>", 5),
        ("exec_async", "ValueError: async bad", 7),  # the coroutine's own frame only
    ],
)
def test_exception_types_and_coroutines(
    urls: tuple[str, str], repo: Path, name: str, described: str, line: int
) -> None:
    expected = (
        f"Failed to process the request(s) for model '{name}_0_0', message: {described}"
        f"\n\nAt:\n  {_model_file(repo, name)}({line}): execute\n"
    )
    assert _infer_errors(urls, name) == [expected, expected]


def test_a_check_of_the_stubs_own_is_its_message_alone(urls: tuple[str, str]) -> None:
    expected = (
        "Failed to process the request(s) for model 'exec_count_0_0', message: Number of "
        "InferenceResponse objects do not match the number of InferenceRequest objects. "
        "InferenceRequest(s) size is:1, and InferenceResponse(s) size is:0\n"
    )
    assert _infer_errors(urls, "exec_count") == [expected, expected]


def test_a_model_without_execute_loads_and_fails_each_request(
    urls: tuple[str, str], repo: Path
) -> None:
    expected = (
        "Failed to process the request(s) for model 'no_execute_0_0', message: Python model "
        f"{_model_file(repo, 'no_execute')} does not implement `execute` method."
    )
    assert _infer_errors(urls, "no_execute") == [expected, expected]


def test_a_model_imports_its_neighbours_relatively(urls: tuple[str, str]) -> None:
    with grpcclient.InferenceServerClient(urls[0]) as client:
        client.load_model("rel_import")
        tensor = grpcclient.InferInput("INPUT0", [3], "UINT8")
        tensor.set_data_from_numpy(np.ones(3, np.uint8))
        result = client.infer("rel_import", [tensor])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), np.full(3, 8, np.uint8))
