"""``pb_utils.MetricFamily`` and ``Metric``: a model's custom metrics, kept by the server.

The objects here only name a family or a label set; every call goes to the server
(``metric_calls.py`` on its side, ``telemetry/custom_metrics.py`` the registry) and waits
for its answer, as Triton's stub does, so errors raise here with the stub's texts
(python_backend r24.10, metric.cc / metric_family.cc). Each object holds one reference on
the server, given back when it is collected. A ``Metric`` whose ``MetricFamily`` object
was collected first refuses every call, as in Triton.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .pb_core import TritonModelException

__all__ = ["Metric", "MetricFamily", "MetricKind", "set_metric_transport"]

#: (operation, *arguments) -> result; raises TritonModelException with the server's text.
Call = Callable[..., Any]
#: (operation, *arguments): a reference given back, no answer awaited.
Release = Callable[..., None]
_call: Call | None = None
_release: Release | None = None

_CLEARED = (
    "Invalid metric operation as the corresponding 'MetricFamily' has been deleted. The "
    "'MetricFamily' object should be deleted AFTER its corresponding 'Metric' objects have "
    "been deleted."
)


def set_metric_transport(call: Call | None, release: Release | None) -> None:
    global _call, _release
    _call, _release = call, release


def _server(operation: str, *args: Any) -> Any:
    if _call is None:
        raise TritonModelException("custom metrics are only available inside a model's worker")
    return _call(operation, *args)


class MetricKind:
    COUNTER = 0
    GAUGE = 1
    HISTOGRAM = 2


class Metric:
    """One label set of a family; create it with ``MetricFamily.Metric``."""

    def __init__(self, family: MetricFamily, labels: dict[str, str]) -> None:
        self._family_name = family._name
        self._labels = labels
        self._cleared = False
        weakref.finalize(self, _give_back, "metric", self._family_name, dict(labels))

    def _operate(self, operation: str, what: str, value: float = 0.0) -> float:
        try:
            if self._cleared:
                raise TritonModelException(_CLEARED)
            return float(_server("update", self._family_name, self._labels, operation, value))
        except TritonModelException as exc:
            raise TritonModelException(f"{what}: {exc}") from None

    def increment(self, value: float) -> None:
        self._operate("increment", "Failed to increment metric value", float(value))

    def set(self, value: float) -> None:
        self._operate("set", "Failed to set metric value", float(value))

    def observe(self, value: float) -> None:
        self._operate("observe", "Failed to observe metric value", float(value))

    def value(self) -> float:
        return self._operate("value", "Failed to get metric value")


class MetricFamily:
    COUNTER = MetricKind.COUNTER
    GAUGE = MetricKind.GAUGE
    HISTOGRAM = MetricKind.HISTOGRAM

    def __init__(self, name: str, description: str, kind: int) -> None:
        try:
            _server("family", str(name), str(description), int(kind))
        except TritonModelException as exc:
            raise TritonModelException(f"Error when creating MetricFamily: {exc}") from None
        self._name = str(name)
        self._kind = int(kind)
        self._metrics: weakref.WeakSet[Metric] = weakref.WeakSet()
        weakref.finalize(self, _family_gone, self._name, self._metrics)

    def Metric(
        self,
        labels: Mapping[str, str] | None = None,
        buckets: Sequence[float] | None = None,
    ) -> Metric:
        if labels is not None and not isinstance(labels, dict):
            raise TritonModelException("Failed to create metric. Labels must be a dictionary.")
        if buckets is not None:
            if not isinstance(buckets, list):
                raise TritonModelException("Failed to create metric. Buckets must be a list.")
            if self._kind != MetricKind.HISTOGRAM:
                raise TritonModelException("Failed to create metric. Unexpected buckets found.")
        elif self._kind == MetricKind.HISTOGRAM:
            raise TritonModelException("Failed to create metric. Missing required buckets.")
        label_map = {str(k): str(v) for k, v in (labels or {}).items()}
        bounds = None if buckets is None else [float(b) for b in buckets]
        try:
            _server("metric", self._name, label_map, bounds)
        except TritonModelException as exc:
            raise TritonModelException(f"Error when creating Metric: {exc}") from None
        metric = Metric(self, label_map)
        self._metrics.add(metric)
        return metric


def _give_back(kind: str, name: str, labels: dict[str, str] | None) -> None:
    if _release is not None:
        _release("release", name, labels if kind == "metric" else None)


def _family_gone(name: str, metrics: weakref.WeakSet[Metric]) -> None:
    for metric in list(metrics):
        metric._cleared = True
    _give_back("family", name, None)
