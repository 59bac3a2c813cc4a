"""Custom metrics (``pb_utils.MetricFamily`` / ``Metric``), end to end: a real server, the
probe model (tests/python_models/custom_metrics/cm_probe) and ``/metrics``.

The texts are those of python_backend r24.10 (metric.cc, metric_family.cc) around the
core's (metric_family.cc); the exposition is prometheus-cpp's (labels sorted, 16
significant digits, histogram _count/_sum/_bucket with "+Inf"). The reference Triton 2.51
on this machine aborts in its python backend on any metric call (the same
boost::interprocess lock_exception as model control), so nothing here could be run on it;
Triton's own qa model for this API (qa/python_models/custom_metrics, 10 unittests run
inside the model) passed against this server when run by hand with --metrics-port 8002.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from integration_support import running_server
from operations_support import http_get, metrics_port
from server_process import REPO_ROOT, ServerProcess

PROBE = REPO_ROOT / "tests" / "python_models" / "custom_metrics" / "cm_probe"
CLEARED = (
    "Invalid metric operation as the corresponding 'MetricFamily' has been deleted. The "
    "'MetricFamily' object should be deleted AFTER its corresponding 'Metric' objects have "
    "been deleted."
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("custom_metrics")
    shutil.copytree(PROBE, repo / "cm_probe")
    with running_server([repo]) as proc:
        yield proc


def _case(server: ServerProcess, case: int) -> tuple[object, list[str]]:
    """The probe's answer, then the custom lines at /metrics."""
    with grpcclient.InferenceServerClient(server.url) as client:
        tensor = grpcclient.InferInput("CASE", [1], "INT32")
        tensor.set_data_from_numpy(np.array([case], np.int32))
        answer = json.loads(client.infer("cm_probe", [tensor]).as_numpy("TEXT")[0].decode())
    _, _, body = http_get(f"http://127.0.0.1:{metrics_port(server)}/metrics")
    return answer, [line for line in body.decode().splitlines() if "probe_" in line]


def _refused(prefix: str, text: str) -> list[str]:
    return ["TritonModelException", f"{prefix}: {text}"]


def test_custom_metrics_behave_and_export_as_tritons(server: ServerProcess) -> None:
    counter, lines = _case(server, 1)
    assert counter == [
        ["ok", 0.0],
        ["ok", None],
        ["ok", 2023.0],
        _refused(
            "Failed to increment metric value",
            "TRITONSERVER_METRIC_KIND_COUNTER can only be incremented monotonically by "
            "non-negative values.",
        ),
        _refused(
            "Failed to set metric value", "TRITONSERVER_METRIC_KIND_COUNTER does not support Set"
        ),
        _refused(
            "Failed to observe metric value",
            "TRITONSERVER_METRIC_KIND_COUNTER does not support Observe",
        ),
    ]
    assert lines == [
        "# HELP probe_counter a counter",
        "# TYPE probe_counter counter",
        'probe_counter{a="1",b="2"} 2023',
    ]

    gauge, lines = _case(server, 2)
    assert [g[1] for g in gauge[:5]] == [None, None, -13.5, None, 999.9]  # type: ignore[index]
    assert lines[-1] == "probe_gauge 999.9"

    histogram, lines = _case(server, 3)
    assert histogram[0] == _refused(  # type: ignore[index]
        "Failed to get metric value", "TRITONSERVER_METRIC_KIND_HISTOGRAM does not support Value"
    )
    assert lines[lines.index("# TYPE probe_hist histogram") + 1 :] == [
        'probe_hist_count{k="v"} 3',
        'probe_hist_sum{k="v"} 7.55',
        'probe_hist_bucket{k="v",le="0.1"} 1',
        'probe_hist_bucket{k="v",le="1"} 1',
        'probe_hist_bucket{k="v",le="2.5"} 2',
        'probe_hist_bucket{k="v",le="5"} 2',
        'probe_hist_bucket{k="v",le="10"} 3',
        'probe_hist_bucket{k="v",le="+Inf"} 3',
    ]


def test_bad_arguments_are_refused_with_tritons_texts(server: ServerProcess) -> None:
    answers, _ = _case(server, 4)
    sorted_ = "Error when creating Metric: Bucket Boundaries must be strictly sorted"
    assert answers == [
        ["TritonModelException", "Failed to create metric. Missing required buckets."],
        ["TritonModelException", sorted_],
        ["TritonModelException", sorted_],
        ["ok", "object"],  # an empty bucket list: only +Inf
        ["TritonModelException", "Failed to create metric. Unexpected buckets found."],
        ["TritonModelException", "Failed to create metric. Labels must be a dictionary."],
        ["TritonModelException", "Failed to create metric. Buckets must be a list."],
        [
            "TritonModelException",
            "Error when creating MetricFamily: Family name already exists with a different type",
        ],
        [
            "TritonModelException",
            "Error when creating MetricFamily: Invalid metric name: 'bad name!'",
        ],
        ["TritonModelException", "Error when creating Metric: Invalid label name: 'bad-label'"],
    ]


def test_lifetimes_follow_the_models_objects(server: ServerProcess) -> None:
    """A Metric outliving its MetricFamily object refuses every call; a second family
    object of the same name shares the first (its description kept); released objects
    leave /metrics."""
    lifetime, _ = _case(server, 5)
    assert lifetime == [
        _refused("Failed to set metric value", CLEARED),
        _refused("Failed to increment metric value", CLEARED),
        _refused("Failed to get metric value", CLEARED),
    ]
    shared, lines = _case(server, 6)
    assert shared == [["ok", 7.5]]
    assert lines[-3:] == [
        "# HELP probe_dup first description",
        "# TYPE probe_dup counter",
        'probe_dup{k="1"} 7.5',
    ]
    cleared, lines = _case(server, 7)
    assert cleared == ["cleared"] and lines == []
