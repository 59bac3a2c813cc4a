"""Instance-group updates with work in flight, end to end (issue 39, decision 054).

As Triton 2.51's core does: a load that removes instances answers once the removed ones
have finished their own work; a request running (or queued) on a kept instance goes on
and does not hold the load up. Sequences in progress stay where they are: one on a kept
instance goes on there with its state after the update, one on a removed instance too,
that instance living until its sequences end (qa L0_model_update instance_update_test.py
``*_with_ongoing_sequences``, there with a KIND_GPU group; here CPU groups only).

The Python models count ``initialize`` / ``finalize`` in files; the gated one holds the
executions of its first instance until the test opens the gate, so "in flight" needs no
timing.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from instance_counts import COUNT_PRELUDE, Counts
from integration_support import running_server
from models import write_model
from sequence_models import accumulator_config, accumulator_model

GATED = (
    COUNT_PRELUDE
    + """

class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.folder = config["parameters"]["count_dir"]["string_value"]
        self.name = args["model_instance_name"]
        _count(self.folder, "initialize")

    def execute(self, requests):
        held = self.name.endswith("_0")
        if held:  # the test holds the first instance's executions until it opens the gate
            open(os.path.join(self.folder, "held"), "a").close()
            while not os.path.exists(os.path.join(self.folder, "gate")):
                time.sleep(0.005)
        responses = []
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", data)]))
        return responses

    def finalize(self):
        _count(self.folder, "finalize")
"""
)

GATED_CONFIG = """
name: "gated"
backend: "python"
max_batch_size: {max_batch_size}
input [{{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }}]
output [{{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] }}]
instance_group [{{ count: {count} kind: KIND_CPU }}]
parameters [{{ key: "count_dir" value: {{ string_value: "{folder}" }} }}]
{batching}
"""

TALLY = (
    COUNT_PRELUDE
    + """

class TritonPythonModel:
    \"\"\"SUM: the sequence's running sum, kept in this instance's memory by CORRID (another
    instance, or this one made again, would not know it: a sequence moved fails).\"\"\"

    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.folder = config["parameters"]["count_dir"]["string_value"]
        self.sums = {}
        _count(self.folder, "initialize")

    def execute(self, requests):
        responses = []
        for request in requests:
            value = int(pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy()[0])
            start = int(pb_utils.get_input_tensor_by_name(request, "START").as_numpy()[0])
            corrid = int(pb_utils.get_input_tensor_by_name(request, "CORRID").as_numpy()[0])
            if not start and corrid not in self.sums:
                responses.append(pb_utils.InferenceResponse(
                    error=pb_utils.TritonError(f"sequence {corrid} is not on this instance")))
                continue
            self.sums[corrid] = value if start else self.sums[corrid] + value
            out = pb_utils.Tensor("SUM", np.array([self.sums[corrid]], dtype=np.int32))
            responses.append(pb_utils.InferenceResponse([out]))
        return responses

    def finalize(self):
        _count(self.folder, "finalize")
"""
).replace("import time\n", "import time\n\nimport numpy as np\n", 1)

TALLY_CONFIG = """
name: "tally"
backend: "python"
max_batch_size: 0
input [{{ name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] }}]
output [{{ name: "SUM" data_type: TYPE_INT32 dims: [ 1 ] }}]
instance_group [{{ count: {count} kind: KIND_CPU }}]
parameters [{{ key: "count_dir" value: {{ string_value: "{folder}" }} }}]
sequence_batching {{
  {strategy}
  max_sequence_idle_microseconds: 120000000
  control_input [
    {{ name: "START" control [{{ kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] }}] }},
    {{ name: "CORRID" control [{{ kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 }}] }}
  ]
}}
"""

STRATEGIES = {"direct": "direct { }", "oldest": "oldest { max_candidate_sequences: 4 }"}


def _wait(condition: Callable[[], bool], timeout: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)
    return condition()


class Call(threading.Thread):
    """A blocking client call in a thread of its own: its outcome, once it ends."""

    def __init__(self, call: Callable[[], object]) -> None:
        super().__init__(daemon=True)
        self._call = call
        self.result: object = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.result = self._call()
        except BaseException as exc:  # the test inspects it
            self.error = exc


def _gated_infer(url: str, value: float, batched: bool) -> np.ndarray:
    data = np.full([1, 4] if batched else [4], value, dtype=np.float32)
    tensor = grpcclient.InferInput("INPUT0", list(data.shape), "FP32")
    tensor.set_data_from_numpy(data)
    with grpcclient.InferenceServerClient(url) as client:
        out = client.infer("gated", [tensor]).as_numpy("OUTPUT0")
    assert out is not None
    return out


BATCHING = {
    "default": (0, ""),
    "dynamic": (8, "dynamic_batching { }"),
    "priorities": (8, "dynamic_batching { priority_levels: 2 default_priority_level: 1 }"),
}


@pytest.mark.parametrize("scheduler", sorted(BATCHING))
def test_removing_an_instance_does_not_wait_for_kept_ones(tmp_path: Path, scheduler: str) -> None:
    """A request held on the kept instance: the load that removes the other one answers
    (that one finalized), the held request is answered after it, nothing lost."""
    max_batch_size, batching = BATCHING[scheduler]
    batched = max_batch_size > 0
    repo, folder = tmp_path / "repo", tmp_path / "counts"
    (repo / "gated" / "1").mkdir(parents=True)
    folder.mkdir()
    (repo / "gated" / "1" / "model.py").write_text(GATED)

    def write(count: int) -> None:
        text = GATED_CONFIG.format(
            count=count, folder=folder, max_batch_size=max_batch_size, batching=batching
        )
        (repo / "gated" / "config.pbtxt").write_text(text)

    write(2)
    counts = Counts(folder)
    held = folder / "held"
    with (
        running_server([repo], ["--model-control-mode=explicit"]) as server,
        grpcclient.InferenceServerClient(server.url) as client,
    ):
        client.load_model("gated")
        # Requests until one runs on gated_0, the instance the update keeps (the first of
        # its signature); one on gated_1 is answered at once.
        request = None
        for attempt in range(100):
            call = Call(lambda a=attempt: _gated_infer(server.url, float(a), batched))
            call.start()
            assert _wait(lambda c=call: held.exists() or not c.is_alive())
            if held.exists():
                request = (call, float(attempt))
                break
            call.join()
            assert call.error is None, call.error
        assert request is not None, "no request ever ran on gated_0"
        call, value = request
        try:
            write(1)  # removes gated_1, keeps gated_0
            load = Call(lambda: client.load_model("gated"))
            load.start()
            load.join(timeout=120)
            assert not load.is_alive(), "the load waited for the request on the kept instance"
            assert load.error is None, load.error
            assert call.is_alive(), "the held request ended before the gate opened"
            assert (counts("initialize"), counts("finalize")) == (2, 1)
        finally:
            (folder / "gate").touch()
        call.join(timeout=60)
        assert call.error is None, call.error
        assert (np.asarray(call.result) == value).all()
        assert (_gated_infer(server.url, 7.0, batched) == 7.0).all()
        stats = client.get_inference_statistics("gated", as_json=True)["model_stats"][0]
        success = int(stats["inference_stats"]["success"]["count"])
        failures = int(stats["inference_stats"]["fail"].get("count", 0))
        assert (success, failures) == (attempt + 2, 0)
        client.unload_model("gated")
        assert counts.wait("finalize", 2) == 2
        assert counts("initialize") == 2


def _add(
    client: grpcclient.InferenceServerClient,
    model: str,
    sequence: int,
    value: int,
    output: str = "SUM",
    **flags: bool,
) -> int:
    shape = [1] if model == "tally" else [1, 1]
    tensor = grpcclient.InferInput("INPUT", shape, "INT32")
    tensor.set_data_from_numpy(np.full(shape, value, dtype=np.int32))
    result = client.infer(model, [tensor], sequence_id=sequence, **flags)
    total = result.as_numpy(output)
    assert total is not None
    return int(total.flatten()[0])


@pytest.mark.parametrize("strategy", sorted(STRATEGIES))
def test_sequences_in_progress_stay_on_their_instances(tmp_path: Path, strategy: str) -> None:
    """Sequences started before updates go on, on their instances (the Python model keeps
    their sums in its memory): after one that adds an instance, and after one that
    removes the instances of two of them, which live until their sequences end (as in
    Triton: qa ``test_*_scheduler_update_with_ongoing_sequences``); a START restarts one
    in the new version."""
    repo, folder = tmp_path / "repo", tmp_path / "counts"
    (repo / "tally" / "1").mkdir(parents=True)
    folder.mkdir()
    (repo / "tally" / "1" / "model.py").write_text(TALLY)

    def write(count: int) -> None:
        text = TALLY_CONFIG.format(count=count, folder=folder, strategy=STRATEGIES[strategy])
        (repo / "tally" / "config.pbtxt").write_text(text)

    def add(sequence: int, value: int, **flags: bool) -> int:
        return _add(client, "tally", sequence, value, **flags)

    write(3)
    counts = Counts(folder)
    with (
        running_server([repo], ["--model-control-mode=explicit"]) as server,
        grpcclient.InferenceServerClient(server.url) as client,
    ):
        client.load_model("tally")
        assert add(1, 1, sequence_start=True) == 1
        assert add(2, 10, sequence_start=True) == 10
        assert add(6, 7, sequence_start=True) == 7

        write(4)  # adds one: the sequences' instances are kept
        client.load_model("tally")
        assert (counts("initialize"), counts("finalize")) == (4, 0)
        assert add(1, 2) == 3
        assert add(2, 20) == 30
        # A START for a sequence in progress begins it again and ends the old one there
        # (or the replaced version would wait for it to idle out).
        assert add(6, 8, sequence_start=True) == 8
        assert add(6, 1, sequence_end=True) == 9
        assert add(3, 100, sequence_start=True) == 100

        write(1)  # keeps one instance: the sequences on the others go on there
        client.load_model("tally")
        assert counts("initialize") == 4
        assert add(1, 3) == 6
        assert add(2, 30) == 60
        assert add(3, 200) == 300
        assert add(4, 1000, sequence_start=True) == 1000
        assert add(1, 4, sequence_end=True) == 10
        assert add(2, 40, sequence_end=True) == 100
        assert add(3, 300, sequence_end=True) == 600
        assert counts.wait("finalize", 3) == 3  # the removed ones, once their sequences ended
        assert add(4, 2000, sequence_end=True) == 3000
        assert add(5, 5, sequence_start=True, sequence_end=True) == 5
        stats = client.get_inference_statistics("tally", as_json=True)["model_stats"][0]
        assert int(stats["inference_stats"]["success"]["count"]) == 17
        assert int(stats["inference_stats"]["fail"].get("count", 0)) == 0
        client.unload_model("tally")
        assert counts.wait("finalize", 4) == 4
        assert counts("initialize") == 4


@pytest.mark.parametrize("strategy", sorted(STRATEGIES))
def test_implicit_state_survives_an_update(tmp_path: Path, strategy: str) -> None:
    """An ONNX accumulator (implicit state): sequences in progress keep their state
    through an update that adds an instance and one that removes one."""
    repo = tmp_path / "repo"

    def config(count: int) -> str:
        return accumulator_config(
            "acc", instance_count=count, strategy=STRATEGIES[strategy], idle_us=120_000_000
        )

    write_model(repo, "acc", accumulator_model(), config(2))

    def add(sequence: int, value: int, **flags: bool) -> int:
        return _add(client, "acc", sequence, value, output="OUTPUT", **flags)

    with (
        running_server([repo], ["--model-control-mode=explicit"]) as server,
        grpcclient.InferenceServerClient(server.url) as client,
    ):
        client.load_model("acc")
        assert add(1, 1, sequence_start=True) == 1
        assert add(2, 10, sequence_start=True) == 10
        (repo / "acc" / "config.pbtxt").write_text(config(3))
        client.load_model("acc")
        assert add(1, 2) == 3
        assert add(2, 20) == 30
        assert add(3, 100, sequence_start=True) == 100
        (repo / "acc" / "config.pbtxt").write_text(config(1))
        client.load_model("acc")
        assert add(1, 3, sequence_end=True) == 6
        assert add(2, 30, sequence_end=True) == 60
        assert add(3, 200, sequence_end=True) == 300
        assert add(4, 7, sequence_start=True, sequence_end=True) == 7
        assert "updated the instances of 'acc' version 1 in place" in server.log
