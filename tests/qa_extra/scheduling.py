"""Issue 39: scheduler behaviour users meet on a live server, as Triton's own qa pins it.

- request_cancellation_scheduler: qa/L0_request_cancellation/scheduler_test.py (test.sh's
  "End-to-end scheduler tests"): a cancelled request still queued in the dynamic batcher,
  the Direct and Oldest sequence batchers or the sequence backlog is answered CANCELLED;
  cancelling one queued request of a sequence cancels every queued request of it, and the
  ``nv_inference_request_failure{reason="CANCELED"}`` metric counts each. The models run on
  the ``identity`` C++ test backend with ``execute_delay_ms``, stood in for by the runner's
  identity_delay; the configs are test.sh's, written here as its ``echo`` lines make them.
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
]
