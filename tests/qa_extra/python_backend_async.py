"""Python-backend concurrency and rescheduling (issue 27, items 5 and 7), on the
repositories the tests' test.sh build (qa/L0_backend_python/<dir>/test.sh).

``async_execute``: a decoupled ``async def execute`` runs as a coroutine on the instance's
event loop, so one instance works on several requests at once, also when each awaits a
decoupled BLS call (``*_bls``: ``async_exec(decoupled=True)`` returns once the first
response is here, as Triton's ``InferRequest::Exec``, so the loop is never blocked in the
response iterator while other requests wait to start). Triton's stub awaits
a non-decoupled coroutine before it takes the next batch (python_backend r24.10,
``Stub::ProcessRequests``: ``RunCoroutine(..., in_background=false)`` returns
``future.result()``), so no qa test exists for that case; the project's tests pin it.

``request_rescheduling``: ``sequence_batching { iterative_sequence: true }`` and
``TRITONSERVER_REQUEST_RELEASE_RESCHEDULE`` (grpc_endpoint_test.py, both tests). test.sh
also runs ``test_infer_shm_leak.py`` on ``bls_request_rescheduling``, a BLS model: not
selected.

Every suite here passed on the reference Triton 2.51 (python backend r24.10) before it was
added.
"""

from __future__ import annotations

from typing import Any

from manifest import Suite  # type: ignore[import-not-found]

PY = "python_models"


def _model(r: Any, name: str) -> None:
    """test.sh's ``mkdir -p models/<name>/1 && cp ../../python_models/<name>/... models/<name>``."""
    r.copy(r.qa(f"{PY}/{name}/model.py"), f"{name}/1/model.py")
    r.copy(r.qa(f"{PY}/{name}/config.pbtxt"), f"{name}/config.pbtxt")


def repo_async_execute(r: Any) -> None:
    _model(r, "async_execute_decouple")
    _model(r, "async_execute_decouple_bls")


def repo_request_rescheduling(r: Any) -> None:
    for name in ("request_rescheduling_addsub", "iterative_sequence", "wrong_return_type"):
        _model(r, name)


ASYNC_EXECUTE_TESTS = [
    "test_concurrent_execute_single_request",
    "test_concurrent_execute_multi_request",
    "test_concurrent_execute_single_request_bls",
    "test_concurrent_execute_multi_request_bls",
    "test_concurrent_execute_different_duration",
    "test_model_raise_exception",
]

SUITES = [
    Suite(
        "python_async_execute",
        "L0_backend_python/async_execute",
        "concurrency_test.py",
        [f"ConcurrencyTest::{t}" for t in ASYNC_EXECUTE_TESTS],
        repo_async_execute,
        args=["--log-verbose=1"],
        default=False,
        note="decoupled async execute runs concurrently on one instance, with and without "
        "BLS; test_model_raise_exception reads the server log (SERVER_LOG) and "
        "fails when a kept --workdir is reused (the log then holds the last run's error)",
    ),
    Suite(
        "python_request_rescheduling",
        "L0_backend_python/request_rescheduling",
        "grpc_endpoint_test.py",
        ["GrpcEndpointTest"],
        repo_request_rescheduling,
        args=["--model-control-mode=explicit", "--load-model=*", "--log-verbose=1"],
        default=False,
        note="iterative_sequence: decoupled, 3 responses over 3 iterations; addsub: its "
        "first request rescheduled once; test_infer_shm_leak.py (BLS model) not selected",
    ),
]
