"""Python-backend semantics (issue 27, items 4 and 6): Triton's own qa tests of the response
sender, decoupled errors, error codes and cancellation, and the gRPC stream error mode, each
on the repository its test.sh builds (qa/L0_backend_python/*/test.sh). Async execute and
request rescheduling (items 5 and 7) are in ``python_backend_async.py``.

Every suite here passed on the reference Triton 2.51 (python backend r24.10) before it was
added. Where a test reads the server log under test.sh's file name (``lifecycle_server.log``,
``decoupled_server.log`` in the test's folder), the recipe links that name to the runner's
server log of the suite, which is what test.sh's ``SERVER_LOG=./<name>`` amounts to.
Suites whose tests probe Triton's shared-memory regions (qa/common/shm_util.py's
``ShmLeakDetector``, which needs Triton's compiled ``triton_shm_monitor``) run with
``TEST_JETSON=1``, shm_util's own switch that skips that probe: the regions it watches are
Triton's python backend's, which this project does not have.
"""

from __future__ import annotations

import os
from typing import Any

from manifest import Suite  # type: ignore[import-not-found]

PY = "python_models"


def _model(r: Any, src: str, name: str | None = None, model_file: str = "model.py") -> str:
    """test.sh's ``mkdir -p models/<name>/1 && cp ../../python_models/<src>/... models/<name>``."""
    name = name or src
    r.copy(r.qa(f"{PY}/{src}/{model_file}"), f"{name}/1/model.py")
    r.copy(r.qa(f"{PY}/{src}/config.pbtxt"), f"{name}/config.pbtxt")
    return name


def _link_server_log(r: Any, qa_dir: str, file_name: str, suite_id: str) -> None:
    """The test opens ``file_name`` in its own folder: point it at the suite's server log."""
    link = os.path.join(r.qa(qa_dir), file_name)
    target = os.path.join(r.src.work, "logs", f"{suite_id}.server.log")
    if os.path.lexists(link):
        os.remove(link)
    os.symlink(target, link)


# --------------------------------------------------------------- L0_backend_python/response_sender


def repo_response_sender(r: Any) -> None:
    variants = {
        "response_sender": ("model.py", ""),
        "response_sender_decoupled": ("model.py", "decoupled"),
        "response_sender_async": ("model_async.py", ""),
        "response_sender_decoupled_async": ("model_async.py", "decoupled"),
        "response_sender_batching": ("model.py", "batching"),
        "response_sender_decoupled_batching": ("model.py", "decoupled batching"),
        "response_sender_async_batching": ("model_async.py", "batching"),
        "response_sender_decoupled_async_batching": ("model_async.py", "decoupled batching"),
    }
    for name, (model_file, extra) in variants.items():
        _model(r, "response_sender", name, model_file)
        r.copy(r.qa(f"{PY}/response_sender/model_common.py"), f"{name}/1/model_common.py")
        if "decoupled" in extra:
            r.append(f"{name}/config.pbtxt", "model_transaction_policy { decoupled: True }")
        if "batching" in extra:
            r.append(
                f"{name}/config.pbtxt", "dynamic_batching { max_queue_delay_microseconds: 500000 }"
            )


def repo_response_sender_complete_final(r: Any) -> None:
    _model(r, "response_sender_complete_final")


# --------------------------------------------------------------- L0_backend_python/decoupled

DECOUPLED_TESTS = [
    "test_decoupled_execute_error",
    "test_decoupled_return_response_error",
    "test_decoupled_send_after_close_error",
    "test_decoupled_raise_exception",
    "test_decoupled_execute_cancel",
]


def repo_decoupled(r: Any) -> None:
    for m in (
        "decoupled_execute_error",
        "decoupled_return_response_error",
        "decoupled_send_after_close_error",
        "decoupled_raise_exception",
    ):
        r.copy(r.qa(f"L0_backend_python/decoupled/models/{m}"), m)
    _model(r, "execute_cancel")
    r.append("execute_cancel/config.pbtxt", "model_transaction_policy { decoupled: True }")
    _link_server_log(r, "L0_backend_python/decoupled", "decoupled_server.log", "python_decoupled")


# --------------------------------------------------------------- L0_backend_python/lifecycle

LIFECYCLE_TESTS = [
    "test_error_code",
    "test_execute_cancel",
    "test_batch_error",
    "test_triton_grpc_error_error_on",
    "test_triton_grpc_error_multithreaded",
    "test_triton_grpc_error_cancel",
    "test_triton_grpc_error_error_off",
]


def repo_lifecycle(r: Any) -> None:
    _model(r, "error_code")
    _model(r, "execute_cancel")
    for m, delay in (("execute_error", 12000000), ("execute_grpc_error", 1200000)):
        _model(r, m)
        r.sub(f"{m}/config.pbtxt", r"^name:.*", f'name: "{m}"')
        r.sub(f"{m}/config.pbtxt", r"^max_batch_size:.*", "max_batch_size: 8")
        r.append(
            f"{m}/config.pbtxt",
            "dynamic_batching { preferred_batch_size: [8], "
            f"max_queue_delay_microseconds: {delay} }}",
        )
    _link_server_log(r, "L0_backend_python/lifecycle", "lifecycle_server.log", "python_lifecycle")


NO_SHM_PROBE = {"TEST_JETSON": "1"}

SUITES = [
    Suite(
        "python_response_sender",
        "L0_backend_python/response_sender",
        "response_sender_test.py",
        ["ResponseSenderTest"],
        repo_response_sender,
        args=["--log-verbose=1"],
        default=False,
        note="8 models of qa/python_models/response_sender (test.sh); 2 tests skip themselves",
    ),
    Suite(
        "python_response_sender_complete_final",
        "L0_backend_python/response_sender",
        "response_sender_complete_final_test.py",
        ["ResponseSenderTest"],
        repo_response_sender_complete_final,
        args=["--log-verbose=1"],
        default=False,
        note="reads the server log (SERVER_LOG)",
    ),
    Suite(
        "python_decoupled",
        "L0_backend_python/decoupled",
        "decoupled_test.py",
        [f"DecoupledTest::{t}" for t in DECOUPLED_TESTS],
        repo_decoupled,
        args=["--log-verbose=1"],
        env=NO_SHM_PROBE,
        default=False,
        note="the tests without BLS or GPU DLPack; test.sh's log greps (finalize counts) not run",
    ),
    Suite(
        "python_lifecycle",
        "L0_backend_python/lifecycle",
        "lifecycle_test.py",
        [f"LifecycleTest::{t}" for t in LIFECYCLE_TESTS],
        repo_lifecycle,
        args=["--log-verbose=1"],
        env=NO_SHM_PROBE,
        default=False,
        note="error codes, cancellation, triton_grpc_error stream mode; test_infer_pymodel_error "
        "(wrong_model, failure metrics by reason) not selected; test.sh runs the file 5 times",
    ),
]
