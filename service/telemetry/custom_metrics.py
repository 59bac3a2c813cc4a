"""Custom metrics: the families Python models create (``pb_utils.MetricFamily``), exported
at ``/metrics`` after the server's own, as Triton's core exports them (TRITONSERVER_Metric
API over prometheus-cpp, r24.10 metric_family.cc).

A family is one name of one kind (counter, gauge, histogram); creating it again with the
same kind shares it (its first description stays), with another kind fails. A metric is
one label set of a family (histograms: with their bucket bounds). Both live while some
worker holds a reference (each ``MetricFamily`` / ``Metric`` object in a model counts
one); a worker that ends drops all of its references. Calls come from the Python
workers' reader threads and the scrape runs on the loop: one lock.
"""

from __future__ import annotations

import itertools
import math
import re
import threading
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field

__all__ = ["COUNTER", "CUSTOM_METRICS", "GAUGE", "HISTOGRAM", "CustomMetrics", "MetricError"]

COUNTER, GAUGE, HISTOGRAM = 0, 1, 2  # TRITONSERVER_MetricKind, as pb_utils.MetricFamily
_KIND_NAMES = {COUNTER: "COUNTER", GAUGE: "GAUGE", HISTOGRAM: "HISTOGRAM"}
_TYPES = {COUNTER: "counter", GAUGE: "gauge", HISTOGRAM: "histogram"}
_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*\Z")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*\Z")
#: Bounds on what models may create: every family and label set is rendered each scrape.
MAX_FAMILIES = 10_000
MAX_METRICS = 100_000
MAX_BUCKETS = 1_000

Owner = Hashable
Labels = tuple[tuple[str, str], ...]


class MetricError(Exception):
    """A refused call, with the core's text (the worker adds the stub's prefix)."""


@dataclass
class _Metric:
    labels: Labels
    buckets: tuple[float, ...] = ()
    value: float = 0.0  # counter and gauge; a histogram's sum
    count: int = 0  # histogram observations
    bucket_counts: list[int] = field(default_factory=list)
    refs: int = 0


@dataclass
class _Family:
    name: str
    kind: int
    description: str
    metrics: dict[Labels, _Metric] = field(default_factory=dict)
    refs: int = 0


def _labels(labels: Mapping[str, str]) -> Labels:
    """A label set's key: the pairs sorted by name, as prometheus-cpp keeps and prints them."""
    return tuple(sorted((str(k), str(v)) for k, v in labels.items()))


def _number(value: float) -> str:
    """prometheus-cpp's text for a value (16 significant digits, no trailing zeros)."""
    if math.isnan(value):
        return "Nan"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return f"{value:.16g}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


class CustomMetrics:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._families: dict[str, _Family] = {}
        self._held: dict[Owner, dict[tuple[str, Labels | None], int]] = {}

    # -- calls from the workers ------------------------------------------------------

    def family(self, owner: Owner, name: str, description: str, kind: int) -> None:
        """One more reference to family ``name`` (created when new)."""
        if kind not in _TYPES:
            raise MetricError("Unsupported kind passed to MetricFamily constructor.")
        if not _METRIC_NAME.match(name):
            raise MetricError(f"Invalid metric name: '{name}'")
        with self._lock:
            family = self._families.get(name)
            if family is None:
                if len(self._families) >= MAX_FAMILIES:
                    raise MetricError(f"more than {MAX_FAMILIES} custom metric families")
                family = self._families[name] = _Family(name, kind, description)
            elif family.kind != kind:
                raise MetricError("Family name already exists with a different type")
            family.refs += 1
            self._hold(owner, (name, None), 1)

    def metric(
        self,
        owner: Owner,
        name: str,
        labels: Mapping[str, str],
        buckets: Sequence[float] | None,
    ) -> None:
        """One more reference to the metric of ``labels`` in family ``name``."""
        key = _labels(labels)
        for label, _ in key:
            if not _LABEL_NAME.match(label) or label.startswith("__"):
                raise MetricError(f"Invalid label name: '{label}'")
        with self._lock:
            family = self._family(name)
            bounds: tuple[float, ...] = ()
            if family.kind == HISTOGRAM:
                if buckets is None:
                    raise MetricError("Bucket boundaries not found in Metric args.")
                bounds = tuple(float(b) for b in buckets)
                if len(bounds) > MAX_BUCKETS:
                    raise MetricError(f"more than {MAX_BUCKETS} bucket boundaries")
                if any(a >= b for a, b in itertools.pairwise(bounds)):
                    raise MetricError("Bucket Boundaries must be strictly sorted")
            elif buckets is not None:
                which = "counter" if family.kind == COUNTER else "gauge"
                raise MetricError(f"Unexpected args found in {which} Metric constructor.")
            metric = family.metrics.get(key)
            if metric is None:
                if sum(len(f.metrics) for f in self._families.values()) >= MAX_METRICS:
                    raise MetricError(f"more than {MAX_METRICS} custom metrics")
                metric = family.metrics[key] = _Metric(key, bounds, bucket_counts=[0] * len(bounds))
            metric.refs += 1
            self._hold(owner, (name, key), 1)

    def update(self, name: str, labels: Mapping[str, str], operation: str, value: float) -> float:
        """``increment``, ``set``, ``observe`` or ``value``; the value after it (0 for
        a histogram)."""
        key = _labels(labels)
        with self._lock:
            family = self._family(name)
            metric = family.metrics.get(key)
            if metric is None:
                raise MetricError("Metric has been invalidated.")
            kind = f"TRITONSERVER_METRIC_KIND_{_KIND_NAMES[family.kind]}"
            if operation == "value":
                if family.kind == HISTOGRAM:
                    raise MetricError(f"{kind} does not support Value")
            elif operation == "increment":
                if family.kind == HISTOGRAM:
                    raise MetricError(f"{kind} does not support Increment")
                if family.kind == COUNTER and value < 0.0:
                    raise MetricError(
                        f"{kind} can only be incremented monotonically by non-negative values."
                    )
                metric.value += value
            elif operation == "set":
                if family.kind != GAUGE:
                    raise MetricError(f"{kind} does not support Set")
                metric.value = value
            elif operation == "observe":
                if family.kind != HISTOGRAM:
                    raise MetricError(f"{kind} does not support Observe")
                metric.count += 1
                metric.value += value
                for index, bound in enumerate(metric.buckets):
                    if value <= bound:
                        metric.bucket_counts[index] += 1
            else:
                raise MetricError("Unknown metric operation")
            return metric.value if family.kind != HISTOGRAM else 0.0

    def release(self, owner: Owner, name: str, labels: Mapping[str, str] | None) -> None:
        """One reference fewer to a family (``labels`` None) or one of its metrics."""
        key = None if labels is None else _labels(labels)
        with self._lock:
            if self._hold(owner, (name, key), -1):
                self._drop(name, key, 1)

    def release_owner(self, owner: Owner) -> None:
        """A worker ended: every reference it held goes."""
        with self._lock:
            held = self._held.pop(owner, {})
            for (name, key), count in held.items():
                if key is not None:
                    self._drop(name, key, count)
            for (name, key), count in held.items():
                if key is None:
                    self._drop(name, None, count)

    # -- the scrape --------------------------------------------------------------------

    def render(self) -> str:
        lines: list[str] = []
        with self._lock:
            for family in self._families.values():
                lines.append(f"# HELP {family.name} {family.description}")
                lines.append(f"# TYPE {family.name} {_TYPES[family.kind]}")
                for metric in family.metrics.values():
                    lines.extend(self._lines(family, metric))
        return "".join(line + "\n" for line in lines)

    @staticmethod
    def _lines(family: _Family, metric: _Metric) -> list[str]:
        pairs = [f'{k}="{_escape(v)}"' for k, v in metric.labels]
        braces = "{" + ",".join(pairs) + "}" if pairs else ""
        if family.kind != HISTOGRAM:
            return [f"{family.name}{braces} {_number(metric.value)}"]
        lines = [
            f"{family.name}_count{braces} {metric.count}",
            f"{family.name}_sum{braces} {_number(metric.value)}",
        ]
        bounds = [*(_number(b) for b in metric.buckets), "+Inf"]
        counts = [*metric.bucket_counts, metric.count]
        for bound, count in zip(bounds, counts, strict=True):
            labels = ",".join([*pairs, f'le="{bound}"'])
            lines.append(f"{family.name}_bucket{{{labels}}} {count}")
        return lines

    # -- bookkeeping, under the lock ---------------------------------------------------

    def _family(self, name: str) -> _Family:
        family = self._families.get(name)
        if family is None:
            raise MetricError(f"no metric family '{name}'")
        return family

    def _hold(self, owner: Owner, key: tuple[str, Labels | None], step: int) -> bool:
        """Count a reference of ``owner``'s; False when it had none to give back."""
        held = self._held.setdefault(owner, {})
        count = held.get(key, 0) + step
        if count < 0:
            return False
        if count:
            held[key] = count
        else:
            held.pop(key, None)
        return True

    def _drop(self, name: str, key: Labels | None, count: int) -> None:
        family = self._families.get(name)
        if family is None:
            return
        if key is None:
            family.refs -= count
            if family.refs <= 0:
                del self._families[name]
            return
        metric = family.metrics.get(key)
        if metric is not None:
            metric.refs -= count
            if metric.refs <= 0:
                del family.metrics[key]


#: The server's one registry (Triton's is its core's).
CUSTOM_METRICS = CustomMetrics()
