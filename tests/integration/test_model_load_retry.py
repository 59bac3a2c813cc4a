"""``--model-load-retry-count N``: a version that fails to load is tried N more times, the
last attempt's reason standing, as Triton 2.51 does (checked on the reference with this
model, which fails its first two initializations: N=1 fails on attempt 2 with its text,
N=2 loads on attempt 3)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import tritonclient.grpc as grpcclient
from integration_support import running_server
from server_process import REPO_ROOT
from tritonclient.utils import InferenceServerException

FLAKY = REPO_ROOT / "tests" / "python_models" / "flaky"


def _repo(tmp_path: Path) -> Path:
    shutil.copytree(FLAKY, tmp_path / "flaky")
    return tmp_path


@pytest.mark.parametrize(("retries", "loads"), [(0, False), (1, False), (2, True)])
def test_a_failed_load_is_tried_again(tmp_path: Path, retries: int, loads: bool) -> None:
    repo = _repo(tmp_path)
    args = ["--model-control-mode", "explicit", f"--model-load-retry-count={retries}"]
    with (
        running_server([repo], args) as server,
        grpcclient.InferenceServerClient(server.url) as client,
    ):
        if loads:
            client.load_model("flaky")
            assert client.is_model_ready("flaky")
        else:
            with pytest.raises(InferenceServerException) as caught:
                client.load_model("flaky")
            assert f"RuntimeError: attempt {retries + 1} fails" in caught.value.message()
    assert (repo / "flaky" / "attempts").read_text() == str(min(retries, 2) + 1)
