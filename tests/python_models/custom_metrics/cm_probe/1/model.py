"""Custom metrics probe: CASE selects pb_utils.MetricFamily / Metric calls; TEXT answers,
as JSON, what each returned or raised (families stay alive between cases, so that the
client can read them at /metrics)."""

import json

import numpy as np
import triton_python_backend_utils as pb_utils

KEPT = {}


def attempt(call, *args, **kwargs):
    try:
        result = call(*args, **kwargs)
        return ["ok", result if isinstance(result, (int, float, str, type(None))) else "object"]
    except Exception as exc:
        return [type(exc).__name__, str(exc)]


def family(name, kind, description="probe family"):
    return pb_utils.MetricFamily(name=name, description=description, kind=kind)


def run(case):
    F = pb_utils.MetricFamily
    if case == 1:  # counter
        fam = family("probe_counter", F.COUNTER, "a counter")
        m = fam.Metric(labels={"b": "2", "a": "1"})
        KEPT["counter"] = (fam, m)
        return [
            attempt(m.value),
            attempt(m.increment, 2023.0),
            attempt(m.value),
            attempt(m.increment, -1.5),
            attempt(m.set, 5.0),
            attempt(m.observe, 0.5),
        ]
    if case == 2:  # gauge
        fam = family("probe_gauge", F.GAUGE, "a gauge")
        m = fam.Metric()
        KEPT["gauge"] = (fam, m)
        return [
            attempt(m.increment, 10.0),
            attempt(m.increment, -23.5),
            attempt(m.value),
            attempt(m.set, 999.9),
            attempt(m.value),
            attempt(m.observe, 1.0),
        ]
    if case == 3:  # histogram
        fam = family("probe_hist", F.HISTOGRAM, "a histogram")
        m = fam.Metric(labels={"k": "v"}, buckets=[0.1, 1.0, 2.5, 5.0, 10.0])
        KEPT["hist"] = (fam, m)
        out = [attempt(m.value), attempt(m.increment, 1.0), attempt(m.set, 1.0)]
        for x in (0.05, 1.5, 6.0):
            out.append(attempt(m.observe, x))
        return out
    if case == 4:  # argument errors
        h = family("probe_hist2", F.HISTOGRAM)
        c = family("probe_counter2", F.COUNTER)
        KEPT["args"] = (h, c)
        return [
            attempt(h.Metric, labels={}),
            attempt(h.Metric, labels={}, buckets=[2.5, 0.1]),
            attempt(h.Metric, labels={}, buckets=[1, 1, 2]),
            attempt(h.Metric, labels={}, buckets=[]),
            attempt(c.Metric, labels={}, buckets=[1.0]),
            attempt(c.Metric, labels=[1]),
            attempt(h.Metric, labels={}, buckets=(1.0,)),
            attempt(family, "probe_counter2", F.GAUGE),
            attempt(family, "bad name!", F.COUNTER),
            attempt(c.Metric, labels={"bad-label": "x"}),
        ]
    if case == 5:  # lifetime
        fam = family("probe_life", F.GAUGE)
        m = fam.Metric(labels={"x": "y"})
        del fam
        return [attempt(m.set, 10.0), attempt(m.increment, 10.0), attempt(m.value)]
    if case == 6:  # duplicates share
        f1 = family("probe_dup", F.COUNTER, "first description")
        f2 = family("probe_dup", F.COUNTER, "second description")
        m1 = f1.Metric(labels={"k": "1"})
        m2 = f2.Metric(labels={"k": "1"})
        m1.increment(7.5)
        KEPT["dup"] = (f2, m2)
        del f1, m1
        return [attempt(m2.value)]
    if case == 7:  # release everything kept
        KEPT.clear()
        return ["cleared"]
    return "?"


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            case = int(pb_utils.get_input_tensor_by_name(r, "CASE").as_numpy()[0])
            text = np.array([json.dumps(run(case)).encode()], np.object_)
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("TEXT", text)]))
        return out
