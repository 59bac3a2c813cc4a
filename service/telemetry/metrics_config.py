"""``--metrics-config <setting>=<value>``: which latency metric types to publish.

Triton's settings and defaults (its ``MetricReporterConfig``): ``counter_latencies``
(true), ``histogram_latencies`` (false), ``summary_latencies`` (false) and
``summary_quantiles`` (``0.5:0.05,0.9:0.01,0.95:0.001,0.99:0.001,0.999:0.001``). Triton
ignores what it cannot parse; here a wrong setting or value stops the start instead, with
a message naming it, so a typo cannot silently leave a dashboard empty.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "DEFAULT_QUANTILES",
    "FIRST_RESPONSE_BUCKETS_MS",
    "SUMMARY_AGE_BUCKETS",
    "SUMMARY_MAX_AGE_S",
    "LatencyMetrics",
    "parse_metrics_config",
]

#: (quantile, allowed rank error) pairs, Triton's default.
DEFAULT_QUANTILES: tuple[tuple[float, float], ...] = (
    (0.5, 0.05),
    (0.9, 0.01),
    (0.95, 0.001),
    (0.99, 0.001),
    (0.999, 0.001),
)
#: Sliding window of the summaries: prometheus-cpp's defaults, which Triton does not expose.
SUMMARY_MAX_AGE_S = 60.0
SUMMARY_AGE_BUCKETS = 5
#: Triton's default buckets of ``nv_inference_first_response_histogram_ms``.
FIRST_RESPONSE_BUCKETS_MS: tuple[float, ...] = (100.0, 500.0, 2000.0, 5000.0)

_BOOLEANS = {
    "counter_latencies": "counters",
    "histogram_latencies": "histograms",
    "summary_latencies": "summaries",
}
_SETTINGS = (*_BOOLEANS, "summary_quantiles")


@dataclass(frozen=True)
class LatencyMetrics:
    """Latency metric types: cumulative counters, first-response histograms, summaries."""

    counters: bool = True
    histograms: bool = False
    summaries: bool = False
    quantiles: tuple[tuple[float, float], ...] = DEFAULT_QUANTILES

    @property
    def observed(self) -> bool:
        """Whether requests must be observed one by one (counters are read from totals)."""
        return self.histograms or self.summaries


def _bool(setting: str, value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    raise ValueError(f"--metrics-config {setting}: expected true or false, got '{value}'")


def _quantiles(value: str) -> tuple[tuple[float, float], ...]:
    """``<quantile>:<error>,...``: each quantile in [0, 1], once; each error in [0, 1)."""
    pairs: list[tuple[float, float]] = []
    for item in value.split(","):
        quantile_text, colon, error_text = item.strip().partition(":")
        try:
            quantile, error = float(quantile_text), float(error_text)
        except ValueError:
            quantile = error = math.nan
        if not colon or not 0.0 <= quantile <= 1.0 or not 0.0 <= error < 1.0:
            raise ValueError(
                f"--metrics-config summary_quantiles: '{item}' is not <quantile>:<error> "
                "with a quantile in [0, 1] and an error in [0, 1)"
            )
        if any(quantile == seen for seen, _ in pairs):
            raise ValueError(f"--metrics-config summary_quantiles: quantile {quantile} twice")
        pairs.append((quantile, error))
    return tuple(pairs)


def parse_metrics_config(specs: Sequence[str]) -> LatencyMetrics:
    """Every ``<setting>=<value>`` in order (a later one wins); ValueError names the fault."""
    defaults = LatencyMetrics()
    flags = {
        "counters": defaults.counters,
        "histograms": defaults.histograms,
        "summaries": defaults.summaries,
    }
    quantiles = defaults.quantiles
    for spec in specs:
        setting, equals, value = spec.partition("=")
        setting = setting.strip()
        if not equals or setting not in _SETTINGS:
            raise ValueError(
                f"--metrics-config '{spec}': unknown setting '{setting}'; expected "
                f"<setting>=<value> with a setting of {', '.join(_SETTINGS)}"
            )
        if setting == "summary_quantiles":
            quantiles = _quantiles(value)
        else:
            flags[_BOOLEANS[setting]] = _bool(setting, value)
    return LatencyMetrics(flags["counters"], flags["histograms"], flags["summaries"], quantiles)
