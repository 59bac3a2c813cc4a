"""Issue 39: scheduler behaviour users meet on a live server, as Triton's own qa pins it.

- request_cancellation_scheduler: qa/L0_request_cancellation/scheduler_test.py (test.sh's
  "End-to-end scheduler tests"): a cancelled request still queued in the dynamic batcher,
  the Direct and Oldest sequence batchers or the sequence backlog is answered CANCELLED;
  cancelling one queued request of a sequence cancels every queued request of it, and the
  ``nv_inference_request_failure{reason="CANCELED"}`` metric counts each. The models run on
  the ``identity`` C++ test backend with ``execute_delay_ms``, stood in for by the runner's
  identity_delay; the configs are test.sh's, written here as its ``echo`` lines make them.
- optional_input: qa/L0_optional_input (a fresh server per test, as test.sh): optional
  inputs through the dynamic batcher and through ensembles, including a step whose mapped
  optional input is never produced. identity_2_float32 (identity backend) is stood in for
  by identity_delay, which, like the identity backend, returns OUTPUT<i> for each INPUT<i>
  the request carries.

Left out (``NOT_VALIDATED``): test_ensemble_optional_pipeline expects the second step's
OUTPUT0, whose INPUT0 the step never gets, to come back as zeros. That is the identity
backend's answer for an absent input, which the stand-in does not give (it answers only
what it got), so the reference here answers without OUTPUT0 and fails the test, as the
project does; neither leaves the request unanswered.
"""

from __future__ import annotations

from typing import Any

from manifest import Suite, identity_delay  # type: ignore[import-not-found]

_IDENTITY_FP32 = """
max_batch_size: {mbs}
input [{{ name: "INPUT0"
 data_type: TYPE_FP32
 dims: [ -1 ] }}]
output [{{ name: "OUTPUT0"
 data_type: TYPE_FP32
 dims: [ -1 ] }}]
instance_group [{{ count: 1
 kind: KIND_CPU }}]
{scheduling}
parameters [{{ key: "execute_delay_ms"
 value: {{ string_value: "6000" }} }}]
"""

# test.sh's End-to-end scheduler models: name -> (max_batch_size, scheduling block)
_SCHEDULER_MODELS = {
    "dynamic_batch": (2, "dynamic_batching { max_queue_delay_microseconds: 600000 }"),
    "sequence_direct": (
        1,
        "sequence_batching { direct { }\n max_sequence_idle_microseconds: 6000000 }",
    ),
    "sequence_oldest": (
        1,
        "sequence_batching { oldest { max_candidate_sequences: 1 }\n"
        " max_sequence_idle_microseconds: 6000000 }",
    ),
}


# test.sh's ensemble_model: dynamic_batch twice in a row
_ENSEMBLE = """name: "ensemble_model"
platform: "ensemble"
max_batch_size: 1
input [{ name: "INPUT0"
 data_type: TYPE_FP32
 dims: [ -1 ] }]
output [{ name: "OUTPUT0"
 data_type: TYPE_FP32
 dims: [ -1 ] }]
ensemble_scheduling { step [
{ model_name: "dynamic_batch"
 model_version: -1
 input_map { key: "INPUT0"
 value: "INPUT0" }
 output_map { key: "OUTPUT0"
 value: "out" } },
{ model_name: "dynamic_batch"
 model_version: -1
 input_map { key: "INPUT0"
 value: "out" }
 output_map { key: "OUTPUT0"
 value: "OUTPUT0" } }
] }
"""


def repo_request_cancellation(r: Any) -> None:
    """test.sh's models, then the identity backend's python stand-in."""
    for name, (mbs, scheduling) in _SCHEDULER_MODELS.items():
        text = f'name: "{name}"\nbackend: "identity"\n' + _IDENTITY_FP32.format(
            mbs=mbs, scheduling=scheduling
        )
        r.write(f"{name}/config.pbtxt", text)
        identity_delay(r, name, r.path(f"{name}/config.pbtxt"))
    r.write("ensemble_model/config.pbtxt", _ENSEMBLE)
    r.mkdir("ensemble_model/1")


def repo_optional_input(r: Any) -> None:
    """qa/L0_optional_input/models, test.sh's version folders, identity stood in for."""
    r.copy(r.qa("L0_optional_input/models"), ".")
    for name in (
        "identity_2_float32",
        "ensemble_identity_2_float32",
        "pipeline_identity_2_float32",
        "optional_connecting_tensor",
    ):
        r.mkdir(f"{name}/1")
    identity_delay(r, "identity_2_float32", r.path("identity_2_float32/config.pbtxt"))


_OPTIONAL_INPUT_TESTS = [
    "test_all_inputs",
    "test_optional_same_input",
    "test_optional_mix_inputs",
    "test_optional_mix_inputs_2",
    "test_ensemble_all_inputs",
    "test_ensemble_optional_same_input",
    "test_ensemble_optional_mix_inputs",
    "test_ensemble_optional_mix_inputs_2",
    "test_ensemble_optional_connecting_tensor",
]

SUITES = [
    Suite(
        "request_cancellation_scheduler",
        "L0_request_cancellation",
        "scheduler_test.py",
        [
            "TestScheduler::test_dynamic_batch_scheduler_request_cancellation",
            "TestScheduler::test_sequence_batch_scheduler_backlog_request_cancellation",
            "TestScheduler::test_direct_sequence_batch_scheduler_request_cancellation",
            "TestScheduler::test_oldest_sequence_batch_scheduler_request_cancellation",
            "TestScheduler::test_ensemble_scheduler_request_cancellation",
            "TestScheduler::test_scheduler_streaming_request_cancellation",
        ],
        repo_request_cancellation,
        default=False,
        note="identity backend stood in for by identity_delay",
    ),
    Suite(
        "optional_input",
        "L0_optional_input",
        "optional_input_test.py",
        [f"OptionalInputTest::{name}" for name in _OPTIONAL_INPUT_TESTS],
        repo_optional_input,
        restart="test",
        default=False,
        note="identity_2_float32 (identity backend) stood in for by identity_delay",
    ),
]

NOT_VALIDATED = [
    Suite(
        "optional_input_pipeline",
        "L0_optional_input",
        "optional_input_test.py",
        ["OptionalInputTest::test_ensemble_optional_pipeline"],
        repo_optional_input,
        restart="test",
        default=False,
        reference="not-validated",
        note="needs the identity backend's zeros for an absent input (module docstring)",
    ),
]
