"""The custom metrics registry (``telemetry/custom_metrics.py``): references per worker,
the bounds, and the exposition; the API end to end is tests/integration/
test_python_custom_metrics.py."""

from __future__ import annotations

import pytest

from service.telemetry.custom_metrics import (
    COUNTER,
    GAUGE,
    HISTOGRAM,
    MAX_BUCKETS,
    CustomMetrics,
    MetricError,
)


def test_a_worker_that_ends_gives_back_every_reference() -> None:
    registry = CustomMetrics()
    registry.family("w1", "shared", "help", GAUGE)
    registry.family("w2", "shared", "other help", GAUGE)
    registry.metric("w1", "shared", {"x": "1"}, None)
    registry.metric("w2", "shared", {"x": "1"}, None)
    registry.update("shared", {"x": "1"}, "set", 3.0)
    registry.release_owner("w1")
    assert registry.render() == '# HELP shared help\n# TYPE shared gauge\nshared{x="1"} 3\n'
    registry.release_owner("w2")
    assert registry.render() == ""


def test_a_release_without_a_reference_changes_nothing() -> None:
    registry = CustomMetrics()
    registry.family("w1", "c", "help", COUNTER)
    registry.release("w2", "c", None)  # w2 never held it
    assert "# TYPE c counter" in registry.render()
    registry.release("w1", "c", None)
    assert registry.render() == ""


def test_labels_are_sorted_and_escaped() -> None:
    registry = CustomMetrics()
    registry.family("w", "c", "help", COUNTER)
    registry.metric("w", "c", {"z": 'say "hi"\n', "a": "back\\slash"}, None)
    line = registry.render().splitlines()[-1]
    assert line == 'c{a="back\\\\slash",z="say \\"hi\\"\\n"} 0'


def test_bounds_keep_what_models_create_finite() -> None:
    registry = CustomMetrics()
    registry.family("w", "h", "help", HISTOGRAM)
    with pytest.raises(MetricError, match="bucket boundaries"):
        registry.metric("w", "h", {}, [float(i) for i in range(MAX_BUCKETS + 1)])
    with pytest.raises(MetricError, match="Unsupported kind"):
        registry.family("w", "k", "help", 7)


def test_values_print_as_prometheus_cpp_does() -> None:
    registry = CustomMetrics()
    registry.family("w", "g", "help", GAUGE)
    registry.metric("w", "g", {}, None)
    for value, text in ((0.1 + 0.2, "0.3"), (1e20, "1e+20"), (float("inf"), "+Inf"), (-2.0, "-2")):
        registry.update("g", {}, "set", value)
        assert registry.render().splitlines()[-1] == f"g {text}"
