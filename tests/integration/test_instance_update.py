"""Instance-group updates in place, end to end: a Python model that counts its
``initialize`` / ``finalize`` calls in files, reloaded through tritonclient while clients
keep inferring.

As Triton 2.51 does (its qa/L0_model_update instance_update_test.py, run against the
reference and this server as the extra suites model_update_*): a load that changes only
``instance_group`` initializes only the added instances and finalizes only the removed
ones, every request during the updates is answered, and any other config change reloads
every instance.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import tritonclient.grpc as grpcclient
from instance_counts import COUNT_PRELUDE, Counts
from integration_support import running_server

MODEL = (
    COUNT_PRELUDE
    + """

class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.folder = config["parameters"]["count_dir"]["string_value"]
        _count(self.folder, "initialize")

    def execute(self, requests):
        time.sleep(0.01)
        responses = []
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", data)]))
        return responses

    def finalize(self):
        _count(self.folder, "finalize")
"""
)

CONFIG = """
name: "counted"
backend: "python"
max_batch_size: 0
input [{{ name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] }}]
output [{{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] }}]
instance_group [{{ count: {count} kind: KIND_CPU }}]
parameters [{{ key: "count_dir" value: {{ string_value: "{folder}" }} }}]
{extra}
"""


def _write(repo: Path, folder: Path, count: int, extra: str = "") -> None:
    text = CONFIG.format(count=count, folder=folder, extra=extra)
    (repo / "counted" / "config.pbtxt").write_text(text)


def _infer(client: grpcclient.InferenceServerClient) -> None:
    data = np.arange(3, dtype=np.float32)
    tensor = grpcclient.InferInput("INPUT0", [3], "FP32")
    tensor.set_data_from_numpy(data)
    out = client.infer("counted", [tensor]).as_numpy("OUTPUT0")
    assert out is not None and (out == data).all()


def test_instance_only_changes_keep_the_running_instances(tmp_path: Path) -> None:
    repo, folder = tmp_path / "repo", tmp_path / "counts"
    (repo / "counted" / "1").mkdir(parents=True)
    folder.mkdir()
    (repo / "counted" / "1" / "model.py").write_text(MODEL)
    _write(repo, folder, 1)
    counts = Counts(folder)
    args = ["--model-control-mode=explicit"]
    with (
        running_server([repo], args) as server,
        grpcclient.InferenceServerClient(server.url) as client,
    ):
        client.load_model("counted")
        assert (counts("initialize"), counts("finalize")) == (1, 0)

        stop, errors, answered = threading.Event(), [], [0]

        def keep_inferring() -> None:
            with grpcclient.InferenceServerClient(server.url) as own:
                while not stop.is_set():
                    try:
                        _infer(own)
                        answered[0] += 1
                    except Exception as exc:  # every request must be answered
                        errors.append(exc)

        clients = [threading.Thread(target=keep_inferring) for _ in range(3)]
        for thread in clients:
            thread.start()
        try:
            _write(repo, folder, 3)  # add two
            client.load_model("counted")
            assert (counts("initialize"), counts("finalize")) == (3, 0)
            _write(repo, folder, 2)  # remove one: finalized before the load returns
            client.load_model("counted")
            assert (counts("initialize"), counts("finalize")) == (3, 1)
            seen = answered[0]
            deadline = time.monotonic() + 30
            while answered[0] == seen and time.monotonic() < deadline:
                time.sleep(0.05)
        finally:
            stop.set()
            for thread in clients:
                thread.join()
        assert errors == [] and answered[0] > seen

        # Another change than the groups: every instance is made again.
        _write(repo, folder, 2, 'parameters [{ key: "other" value: { string_value: "1" } }]')
        client.load_model("counted")
        assert counts("initialize") == 5
        assert counts.wait("finalize", 3) == 3
        _infer(client)

        client.unload_model("counted")
        assert counts.wait("finalize", 5) == 5
