"""Issue 27 (items 2, 3, 9): Triton's test hooks and shutdown behaviour, as its qa pins them.

- client_timeout_non_infer: qa/L0_client_timeout's python part for the non-inference APIs,
  run as test.sh runs it: TRITONSERVER_SERVER_DELAY_GRPC_RESPONSE_SEC=2, explicit mode with
  custom_identity_int32 (identity backend, execute_delay_ms 3000) stood in for by the
  runner's identity_delay python model. The three CUDA shared-memory tests need a GPU;
  test_grpc_load_model fails on the reference here (the python model's load, queued
  behind a 2 s delayed answer, outlasts the test's 5 s unload timeout on 2 cores).
- lifecycle_shutdown_dynamic / lifecycle_shutdown_ensemble: qa/L0_lifecycle's
  test_shutdown_dynamic and test_shutdown_ensemble (SIGINT to the server while requests
  are in flight; new ones refused with "Server is stopping, ...", through the ensemble
  with "in ensemble 'ensemble_zero_1_float32'"); test.sh's in-flight count log lines
  (Triton internals) are not checked.
- lifecycle_shutdown_live_connection: qa/L0_lifecycle's test_shutdown_with_live_connection
  (an HTTP connection opened before SIGINT is still served 2 s after it; the server's log
  then holds the core's "Waiting for in-flight requests to complete." and exactly one
  "Timeout 30: ", as the HTTP connections' countdown hands the time left to the core's).
  The runner's server log is both processes' output (gateway and service). In the
  default selection (issue 39, item 9): it passes on the reference and here.
"""

from manifest import Suite, echoes, identity_delay

NON_INFER = [
    "test_grpc_server_live",
    "test_grpc_is_server_ready",
    "test_grpc_is_model_ready",
    "test_grpc_get_server_metadata",
    "test_grpc_get_model_metadata",
    "test_grpc_get_model_config",
    "test_grpc_model_repository_index",
    "test_grpc_unload_model",
    "test_grpc_get_inference_statistics",
    "test_grpc_update_trace_settings",
    "test_grpc_get_trace_settings",
    "test_grpc_update_log_settings",
    "test_grpc_get_log_settings",
    "test_grpc_get_system_shared_memory_status",
    "test_grpc_register_system_shared_memory",
    "test_grpc_unregister_system_shared_memory",
]


def repo_client_timeout(r):
    name = "custom_identity_int32"
    identity_delay(r, name, r.qa(f"L0_client_timeout/models/{name}/config.pbtxt"))


def _lifecycle_zero(r, test):
    m = "custom_zero_1_float32"
    identity_delay(r, m, r.qa("custom_models/custom_zero_1_float32/config.pbtxt"))
    appended = echoes(r, "L0_lifecycle/test.sh", f"# LifeCycleTest.{test}", "SERVER_ARGS=")
    r.append(f"{m}/config.pbtxt", appended)


def repo_shutdown_dynamic(r):
    _lifecycle_zero(r, "test_shutdown_dynamic")


def repo_live_connection(r):
    """test.sh: ``cp -r ../python_models/add_sub models/``, model.py moved into ``1/``."""
    r.copy(r.qa("python_models/add_sub/config.pbtxt"), "add_sub/config.pbtxt")
    r.copy(r.qa("python_models/add_sub/model.py"), "add_sub/1/model.py")


def repo_shutdown_ensemble(r):
    r.copy(r.qa("L0_lifecycle/ensemble_zero_1_float32"), "ensemble_zero_1_float32")
    r.mkdir("ensemble_zero_1_float32/1")
    _lifecycle_zero(r, "test_shutdown_ensemble")


SUITES = [
    Suite(
        "client_timeout_non_infer",
        "L0_client_timeout",
        "client_non_infer_timeout_test.py",
        [f"ClientNonInferTimeoutTest::{t}" for t in NON_INFER],
        repo_client_timeout,
        args=["--model-control-mode=explicit", "--load-model=custom_identity_int32"],
        env={"TRITONSERVER_SERVER_DELAY_GRPC_RESPONSE_SEC": "2"},
        timeout=600,
        default=False,
        note="TRITONSERVER_SERVER_DELAY_GRPC_RESPONSE_SEC (Triton test hook); CUDA tests left out",
    ),
    Suite(
        "lifecycle_shutdown_dynamic",
        "L0_lifecycle",
        "lifecycle_test.py",
        ["LifeCycleTest::test_shutdown_dynamic"],
        repo_shutdown_dynamic,
        args=["--log-verbose=1"],
        restart="test",
        timeout=180,
        default=False,
        note="the test sends SIGINT to SERVER_PID; custom_zero_1_float32 = identity_delay (5 s)",
    ),
    Suite(
        "lifecycle_shutdown_ensemble",
        "L0_lifecycle",
        "lifecycle_test.py",
        ["LifeCycleTest::test_shutdown_ensemble"],
        repo_shutdown_ensemble,
        args=["--log-verbose=1"],
        restart="test",
        timeout=180,
        default=False,
        note="as lifecycle_shutdown_dynamic, through qa's ensemble_zero_1_float32",
    ),
    Suite(
        "lifecycle_shutdown_live_connection",
        "L0_lifecycle",
        "lifecycle_test.py",
        ["LifeCycleTest::test_shutdown_with_live_connection"],
        repo_live_connection,
        args=["--exit-timeout-secs=30"],  # test.sh's default (the reference script sets 5)
        restart="test",
        timeout=180,
        note="the test sends SIGINT to SERVER_PID and reads SERVER_LOG (both processes' output)",
    ),
]
