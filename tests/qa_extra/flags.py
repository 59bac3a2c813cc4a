"""Triton's qa tests of the tritonserver flags (issue 27, item 1): the trace and log flags.

``L0_trace/trace_endpoint_test.py`` (6 tests: the TraceSetting API over gRPC and HTTP) runs
against the server L0_trace/test.sh starts for it, ``--trace-config triton,file=global_unittest.log
--trace-config level=TIMESTAMPS --trace-config rate=1``: every setting it reads back comes from
those flags (trace_mode ``triton``, trace_count ``-1``, log_frequency ``0`` are the defaults).
The tests only read and update settings of the model ``simple`` (and of an unknown one), so the
repository holds that model alone: test.sh's ``onnx_int32_int32_int32`` as a Python model
(settings do not depend on the backend).

``L0_logging/logging_endpoint_test.py`` (4 tests: the LogSettings API over gRPC and HTTP) runs
against test.sh's server with no log flags: the settings it reads are the ``--log-*`` defaults
(no log file, info / warning / error on, verbose 0, format ``default``), and it checks that the
log file cannot be changed over the network. Same repository (test.sh's ``simple``).

Not suites, as the runner runs Python unittest files only: L0_backend_config (test.sh alone,
grepping the server log), L0_cmdline_trace (trace_client.py is a script; test.sh checks the
trace files with trace_summary.py), the rest of L0_trace's test.sh (curl and trace-file checks)
and its opentelemetry_unittest.py (needs an OpenTelemetry collector), L0_logging's test.sh
checks of the log file per flag and its log_format_test.py (pytest; starts ``tritonserver``
itself).
"""

from __future__ import annotations

from typing import Any

from manifest import Suite

_TRACE_ENDPOINT_TESTS = [
    "TraceEndpointTest::test_http_get_settings",
    "TraceEndpointTest::test_grpc_get_settings",
    "TraceEndpointTest::test_http_update_settings",
    "TraceEndpointTest::test_grpc_update_settings",
    "TraceEndpointTest::test_http_clear_settings",
    "TraceEndpointTest::test_grpc_clear_settings",
]


def repo_simple(r: Any) -> None:
    """L0_trace's and L0_logging's test.sh: ``simple`` = onnx_int32_int32_int32 version 1,
    renamed (as a Python model)."""
    r.python_from_onnx(
        r.gen("qa_model_repository", "onnx_int32_int32_int32"),
        name="simple",
        model_py=r.ours("addsub_generic/model.py"),
    )


SUITES = [
    Suite(
        "trace_endpoint",
        "L0_trace",
        "trace_endpoint_test.py",
        _TRACE_ENDPOINT_TESTS,
        repo_simple,
        args=[
            "--trace-config",
            "triton,file=global_unittest.log",
            "--trace-config",
            "level=TIMESTAMPS",
            "--trace-config",
            "rate=1",
        ],
        default=False,
        note="simple (onnx_int32_int32_int32) as a Python model; the tests only use its settings",
    ),
    Suite(
        "logging_endpoint",
        "L0_logging",
        "logging_endpoint_test.py",
        [
            "LogEndpointTest::test_http_get_settings",
            "LogEndpointTest::test_grpc_get_settings",
            "LogEndpointTest::test_http_update_settings",
            "LogEndpointTest::test_grpc_update_settings",
        ],
        repo_simple,
        default=False,
        note="simple (onnx_int32_int32_int32) as a Python model; the tests do not infer",
    ),
]
