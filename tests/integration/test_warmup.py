"""Model warmup (``model_warmup``), end to end: a real server, tritonclient over gRPC.

What Triton 2.51 does, checked on the reference server with these configs (and the qa
``L0_warmup`` models ``failing_infer`` and ``decoupled``, copied here): every instance runs
each sample ``count`` times before the model is READY, ``batch_size`` one-row requests in
one execution; those runs are the model's statistics; a sample whose response carries an
error fails the load, listing each request's error; a bad sample (variable dimension,
short or missing file, no data kind, a shape or type the model refuses) fails it with
the same texts; an ensemble may not have one. The verbose log names each run.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import models
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from integration_support import running_server
from operations_support import ADD_SUB_IO
from server_process import ServerProcess
from tritonclient.utils import InferenceServerException

SAMPLES = """
model_warmup [
  {
    name: "zeros"
    batch_size: 2
    count: 3
    inputs { key: "INPUT0" value: { data_type: TYPE_FP32 dims: [ 4 ] zero_data: true } }
    inputs { key: "INPUT1" value: { data_type: TYPE_FP32 dims: [ 4 ] random_data: true } }
  },
  {
    name: "from file"
    batch_size: 1
    inputs { key: "INPUT0" value: { data_type: TYPE_FP32 dims: [ 2 ] input_data_file: "raw" } }
    inputs { key: "INPUT1" value: { data_type: TYPE_FP32 dims: [ 2 ] input_data_file: "raw" } }
  },
  {
    name: "skipped"
    batch_size: 0
    inputs { key: "INPUT0" value: { data_type: TYPE_FP32 dims: [ 4 ] zero_data: true } }
  }
]
"""

FAILING = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(
                output_tensors=[], error=pb_utils.TritonError("An Error Occurred")
            )
            for _ in requests
        ]
"""

DECOUPLED = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            request.get_response_sender().send(
                flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
            )
        return None
"""

PYTHON_IO = """
backend: "python"
input [ { name: "INPUT" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_FP32 dims: [ 4 ] } ]
instance_group [{ kind: KIND_CPU }]
"""


def _sample(name: str, data: str, batch_size: int = 1, dims: str = "4") -> str:
    return f"""
model_warmup [{{
  name: "{name}"
  batch_size: {batch_size}
  inputs {{ key: "INPUT" value: {{ data_type: TYPE_FP32 dims: [ {dims} ] {data} }} }}
}}]
"""


# A sequence model's warmup gives its control inputs as well (Triton's override inputs);
# the model answers a real request with what its warmup executions saw.
SEQUENCE = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.seen = []

    def execute(self, requests):
        if requests[0].correlation_id() == 0:
            names = sorted(t.name() for t in requests[0].inputs())
            self.seen.append((len(requests), names))
            return [
                pb_utils.InferenceResponse([pb_utils.Tensor("SEEN", np.zeros((1, 3), np.int32))])
                for _ in requests
            ]
        runs = len(self.seen)
        rows = sum(n for n, _ in self.seen)
        controls = int(all(names == ["INPUT", "READY", "START"] for _, names in self.seen))
        seen = np.array([[runs, rows, controls]], np.int32)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("SEEN", seen)]) for _ in requests]
"""

SEQUENCE_CONFIG = """
backend: "python"
max_batch_size: 8
input [ { name: "INPUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "SEEN" data_type: TYPE_INT32 dims: [ 3 ] } ]
sequence_batching {
  control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
    { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ] } ] }
  ]
}
instance_group [{ kind: KIND_CPU }]
model_warmup [{
  name: "sequence sample"
  batch_size: 4
  count: 2
  inputs { key: "INPUT" value: { data_type: TYPE_FP32 dims: [ 1 ] zero_data: true } }
  inputs { key: "START" value: { data_type: TYPE_INT32 dims: [ 1 ] zero_data: true } }
  inputs { key: "READY" value: { data_type: TYPE_INT32 dims: [ 1 ] zero_data: true } }
}]
"""

ENSEMBLE = """
platform: "ensemble"
max_batch_size: 8
input [
  { name: "A" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "B" data_type: TYPE_FP32 dims: [ 4 ] }
]
output [ { name: "C" data_type: TYPE_FP32 dims: [ 4 ] } ]
ensemble_scheduling { step [ {
  model_name: "add_sub_warm" model_version: -1
  input_map { key: "INPUT0" value: "A" } input_map { key: "INPUT1" value: "B" }
  output_map { key: "OUTPUT0" value: "C" }
} ] }
model_warmup [{ name: "e" batch_size: 1
  inputs { key: "A" value: { data_type: TYPE_FP32 dims: [ 4 ] zero_data: true } } }]
"""

# Each refused model: its expected text after "version 1 is at UNAVAILABLE state: ".
REFUSED = {
    "failing_infer": "Invalid argument: failed to run warmup sample 'zero sample': "
    "An Error Occurred; ",
    "warm_short_file": "Invalid argument: [request id: <id_unknown>] warmup setting expects "
    "16 bytes, but the data provided from rawonly has 8 bytes",
    "warm_variable": "Invalid argument: warmup setting expects all variable-size "
    "dimensions are specified for input 'INPUT'",
    "warm_no_data": "Invalid argument: [request id: <id_unknown>] warmup setting expects "
    "input 'INPUT' to have input_data_type set",
    "warm_wrong_type": "Invalid argument: [request id: <id_unknown>] inference input "
    "'INPUT' data-type is 'INT32', but model 'warm_wrong_type' expects 'FP32'",
    "warm_too_many": "Invalid argument: failed to run warmup sample 's': "
    + "batch size 3 for 'warm_too_many_0_0', max allowed is 0; " * 3,
}


def _python_model(repo: Path, name: str, source: str, config: str) -> Path:
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "1" / "model.py").write_text(source)
    (repo / name / "config.pbtxt").write_text(f'name: "{name}"\n{config}')
    return repo / name


def build_repository(repo: Path) -> Path:
    config = models.make_config(
        "add_sub_warm", *ADD_SUB_IO, max_batch_size=8, instance_count=2, extra=SAMPLES
    )
    models.write_model(repo, "add_sub_warm", models.add_sub_model(), config)
    (repo / "add_sub_warm" / "warmup").mkdir()
    (repo / "add_sub_warm" / "warmup" / "raw").write_bytes(
        np.array([1.5, 2.5, 9.0], np.float32).tobytes()
    )
    failing = PYTHON_IO + _sample("zero sample", "zero_data: true")
    _python_model(repo, "failing_infer", FAILING, failing)
    decoupled = PYTHON_IO + "model_transaction_policy { decoupled: true }\n"
    _python_model(repo, "decoupled", DECOUPLED, decoupled + _sample("d", "zero_data: true"))
    _python_model(repo, "sequence_warm", SEQUENCE, SEQUENCE_CONFIG)
    short = _python_model(
        repo, "warm_short_file", DECOUPLED, PYTHON_IO + _sample("f", 'input_data_file: "raw"')
    )
    (short / "warmup").mkdir()
    (short / "warmup" / "raw").write_bytes(b"abcdefgh")
    variable = PYTHON_IO + _sample("v", "zero_data: true", dims="-1")
    _python_model(repo, "warm_variable", FAILING, variable)
    _python_model(repo, "warm_no_data", FAILING, PYTHON_IO + _sample("n", ""))
    wrong_type = PYTHON_IO + _sample("t", "zero_data: true").replace(
        "data_type: TYPE_FP32 dims", "data_type: TYPE_INT32 dims"
    )
    _python_model(repo, "warm_wrong_type", FAILING, wrong_type)
    too_many = PYTHON_IO + _sample("s", "zero_data: true", batch_size=3)
    _python_model(repo, "warm_too_many", FAILING, too_many)
    huge = PYTHON_IO + _sample("h", "zero_data: true", batch_size=65536, dims="65536")
    _python_model(repo, "warm_huge", FAILING, huge)
    (repo / "ensemble_warm" / "1").mkdir(parents=True)
    (repo / "ensemble_warm" / "config.pbtxt").write_text(f'name: "ensemble_warm"\n{ENSEMBLE}')
    return repo


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = build_repository(tmp_path_factory.mktemp("warmup"))
    args = ["--model-control-mode", "explicit", "--log-verbose", "1"]
    args += ["--load-model", "add_sub_warm", "--load-model", "decoupled"]
    args += ["--load-model", "sequence_warm"]
    with running_server([repo], args) as proc:
        yield proc


@pytest.fixture(scope="module")
def client(server: ServerProcess) -> Iterator[grpcclient.InferenceServerClient]:
    with grpcclient.InferenceServerClient(server.url) as c:
        yield c


def _stats(client: grpcclient.InferenceServerClient, model: str) -> dict[str, object]:
    stats = client.get_inference_statistics(model, as_json=True)["model_stats"][0]
    assert isinstance(stats, dict)
    return stats


def test_every_instance_runs_each_sample_before_ready(
    server: ServerProcess, client: grpcclient.InferenceServerClient
) -> None:
    """2 instances x (3 runs of 2 rows + 1 run of 1 row); the batch-0 sample is skipped."""
    stats = _stats(client, "add_sub_warm")
    assert int(stats["inference_count"]) == 14  # type: ignore[call-overload]
    assert int(stats["execution_count"]) == 8  # type: ignore[call-overload]
    success = stats["inference_stats"]["success"]  # type: ignore[index]
    assert int(success["count"]) == 14
    batches = {int(b["batch_size"]): int(b["compute_infer"]["count"]) for b in stats["batch_stats"]}  # type: ignore[attr-defined]
    assert batches == {2: 6, 1: 2}
    for instance in ("add_sub_warm_0_0", "add_sub_warm_0_1"):
        assert (
            f"model 'add_sub_warm' instance {instance} is running warmup sample 'zeros' "
            "for iteration 3" in server.log
        )
        assert (
            f"model 'add_sub_warm' instance {instance} is running warmup sample 'from file' "
            "for iteration 1" in server.log
        )
    assert "Skipping batch 0 warmup sample 'skipped'" in server.log
    assert "failed to run warmup" not in server.log.split("failing_infer")[0]
    a = np.arange(4, dtype=np.float32).reshape(1, 4)
    inputs = [grpcclient.InferInput(n, [1, 4], "FP32") for n in ("INPUT0", "INPUT1")]
    for tensor in inputs:
        tensor.set_data_from_numpy(a)
    result = client.infer("add_sub_warm", inputs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + a)


def test_decoupled_model_warms_up_with_no_response(
    client: grpcclient.InferenceServerClient,
) -> None:
    stats = _stats(client, "decoupled")
    assert (int(stats["inference_count"]), int(stats["execution_count"])) == (1, 1)  # type: ignore[call-overload]


def test_sequence_model_warmup_carries_its_control_inputs(
    client: grpcclient.InferenceServerClient,
) -> None:
    """Two runs of four requests, each with START and READY beside its own input."""
    tensor = grpcclient.InferInput("INPUT", [1, 1], "FP32")
    tensor.set_data_from_numpy(np.zeros((1, 1), np.float32))
    result = client.infer(
        "sequence_warm", [tensor], sequence_id=7, sequence_start=True, sequence_end=True
    )
    assert result.as_numpy("SEEN").tolist() == [[2, 8, 1]]


@pytest.mark.parametrize("model", sorted(REFUSED))
def test_a_failing_or_malformed_sample_fails_the_load(
    server: ServerProcess, client: grpcclient.InferenceServerClient, model: str
) -> None:
    with pytest.raises(InferenceServerException) as caught:
        client.load_model(model)
    assert caught.value.status() == "StatusCode.INVALID_ARGUMENT"
    expected = f"load failed for model '{model}': version 1 is at UNAVAILABLE state: "
    assert caught.value.message() == expected + REFUSED[model] + ";\n"
    assert not client.is_model_ready(model)
    assert f"failed to load '{model}' version 1: {REFUSED[model]}" in server.log


def test_a_warmup_beyond_the_bounds_is_refused_before_any_data(
    client: grpcclient.InferenceServerClient,
) -> None:
    """65,536 rows of 65,536 FP32 values would be 16 GiB built in memory."""
    with pytest.raises(InferenceServerException) as caught:
        client.load_model("warm_huge")
    assert caught.value.message() == (
        "load failed for model 'warm_huge': version 1 is at UNAVAILABLE state: "
        "model_warmup 'h' of model 'warm_huge' needs 17179869184 bytes of data, more than "
        "the limit of 1073741824;\n"
    )


def test_an_ensemble_may_not_warm_up(
    server: ServerProcess, client: grpcclient.InferenceServerClient
) -> None:
    """Triton refuses it when it polls the repository."""
    with pytest.raises(InferenceServerException) as caught:
        client.load_model("ensemble_warm")
    assert caught.value.message() == (
        "failed to load 'ensemble_warm', failed to poll from model repository"
    )
    assert "model_warmup can not be specified for ensemble 'ensemble_warm'" in server.log
