"""Issue 39, item 1: instance-group updates in place (qa/L0_model_update).

instance_update_test.py loads ``model_init_del`` (qa/python_models: a Python model that
counts its ``initialize`` / ``finalize`` calls in files under ``MODEL_LOG_DIR``) in
explicit mode, edits only its ``instance_group`` and loads it again: only the difference
may be initialized or finalized, the model keeps serving, an update does not wait for the
in-flight requests of the instances it keeps, and the rate limiter's resources follow.
test.sh runs the file three times, once per rate-limit mode; so do these suites.

Two things of test.sh's layout the test relies on: it imports
``models.model_init_del.util`` from its own folder and edits the served config through
it, so ``qa/L0_model_update/models`` is made a link to the suite's repository; and
test_instance_resource_decrease reads the server log as
``$MODEL_LOG_DIR/instance_update_test.rate_limit_<mode>.server.log``, so the suite's
folder gets a link of that name to the runner's server log, and ``MODEL_LOG_DIR`` names
that folder (the recipe sets it in the runner's environment, which the runner copies
into the server's and the test's after the recipe ran: the folder exists only then).

Two more, for the setup here rather than Triton's CI: the reference's Python stub
ignores ``PYTHONDONTWRITEBYTECODE`` (an isolated interpreter) and writes
``__pycache__`` into the model's folder during its first load, which Triton then sees
as changed model files and reloads in full; the recipe compiles util.py and model.py
beforehand (the runner's Python, 3.11 like the reference's), so nothing is written
later. And the test's tearDown uses ``TestCase._feedErrorsToResult``, gone since Python
3.11: ``py310_unittest/sitecustomize.py`` (on the test's PYTHONPATH) gives it back.

The tests that write ``KIND_GPU`` groups at run time are left out (``NOT_VALIDATED``):
the reference here has no GPU and fails their loads ("has kind KIND_GPU but no GPUs are
available"), as the project does; the runner's KIND_GPU→KIND_CPU rewrite covers only the
configs it builds, and rewriting the test's groups would change the differences it
counts.
"""

from __future__ import annotations

import os
import py_compile
from typing import Any

from manifest import Suite  # type: ignore[import-not-found]

_MODEL = "model_init_del"
_SHIM = os.path.join(os.path.dirname(os.path.abspath(__file__)), "py310_unittest")
_MODES = {
    "off": ["--rate-limit=off"],
    "execution_count": ["--rate-limit=execution_count"],
    "execution_count_with_explicit_resource": [
        "--rate-limit=execution_count",
        "--rate-limit-resource=R1:10",
    ],
}
_GPU_TESTS = {
    "test_gpu_instance_update",
    "test_gpu_cpu_instance_update",
    "test_instance_name_update",
    "test_instance_signature",
    "test_direct_scheduler_update_with_ongoing_sequences",
    "test_oldest_scheduler_update_with_ongoing_sequences",
}
_CPU_TESTS = [
    "test_add_rm_add_instance_no_batching",
    "test_add_rm_add_instance_with_batching",
    "test_rm_add_rm_instance_no_batching",
    "test_rm_add_rm_instance_with_batching",
    "test_rm_instance_to_zero",
    "test_cpu_instance_update",
    "test_invalid_config",
    "test_model_file_update",
    "test_non_instance_config_update",
    "test_load_api_with_config",
    "test_update_while_inferencing",
    "test_infer_while_updating",
    "test_instance_resource_increase",
    "test_instance_resource_increase_above_explicit",
    "test_instance_resource_decrease",
    "test_direct_scheduler_update_no_ongoing_sequences",
    "test_oldest_scheduler_update_no_ongoing_sequences",
]


def _recipe(mode: str, suite_id: str) -> Any:
    def recipe(r: Any) -> None:
        """test.sh's setup_models: qa/python_models/model_init_del with model.py in 1/."""
        r.copy(r.qa(f"python_models/{_MODEL}"), _MODEL)
        r.mkdir(f"{_MODEL}/1")
        os.replace(r.path(f"{_MODEL}/model.py"), r.path(f"{_MODEL}/1/model.py"))
        for source in (f"{_MODEL}/util.py", f"{_MODEL}/1/model.py"):
            py_compile.compile(r.path(source), doraise=True)
        link = r.qa("L0_model_update/models")
        if os.path.lexists(link):
            os.remove(link)
        os.symlink(r.root, link)
        suite_dir = os.path.dirname(r.root)
        logs = os.path.join(r.src.work, "logs")
        os.symlink(
            os.path.join(logs, f"{suite_id}.server.log"),
            os.path.join(suite_dir, f"instance_update_test.rate_limit_{mode}.server.log"),
        )
        os.environ["MODEL_LOG_DIR"] = suite_dir

    return recipe


def _suite(mode: str, tests: list[str], suffix: str = "", **kw: Any) -> Any:
    suite_id = f"model_update_{mode}{suffix}"
    return Suite(
        suite_id,
        "L0_model_update",
        "instance_update_test.py",
        [f"TestInstanceUpdate::{t}" for t in tests],
        _recipe(mode, suite_id),
        args=["--model-control-mode=explicit", *_MODES[mode], "--log-verbose=2"],
        env={"RATE_LIMIT_MODE": mode, "PYTHONPATH": _SHIM},
        timeout=900,
        default=False,
        **kw,
    )


SUITES = [
    _suite("off", _CPU_TESTS),
    _suite("execution_count", _CPU_TESTS),
    # A fresh server per test: the reference crashed (SIGSEGV under
    # TRITONSERVER_ServerInferAsync) in test_add_rm_add_instance_no_batching on its one
    # server for the file, which took every later test with it.
    _suite("execution_count_with_explicit_resource", _CPU_TESTS, restart="test"),
]

NOT_VALIDATED = [
    _suite(mode, sorted(_GPU_TESTS), suffix="_gpu", reference="not-validated") for mode in _MODES
]
