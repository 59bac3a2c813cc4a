"""Latency summaries and histograms: the sliding-window estimator (with an injected clock),
the ModelStats observer hook, the exposition text, and the --metrics-config flag."""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from inference import model_config_pb2 as mc
from service.config import parse_args
from service.statistics import BatchTimings, ModelStats, set_observer_factory
from service.telemetry.metrics import MetricsRenderer
from service.telemetry.metrics_config import (
    DEFAULT_QUANTILES,
    LatencyMetrics,
    parse_metrics_config,
)
from service.telemetry.metrics_latency import Histogram, LatencyObserver, SlidingQuantiles

SUMMARIES = LatencyMetrics(summaries=True, quantiles=((0.5, 0.05), (0.9, 0.01), (1.0, 0.0)))
LABELS = 'model="m",version="1"'


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class FakeModel:
    name: str
    version: int
    stats: ModelStats
    scheduler: None = None
    config: mc.ModelConfig = field(default_factory=mc.ModelConfig)


@pytest.fixture
def observed() -> Iterator[Clock]:
    """ModelStats created inside the test get a LatencyObserver on an injected clock."""
    clock = Clock()
    set_observer_factory(lambda: LatencyObserver(SUMMARIES, clock))
    try:
        yield clock
    finally:
        set_observer_factory(None)


def _lines(renderer: MetricsRenderer, needle: str) -> list[str]:
    return [line for line in renderer.render().decode().splitlines() if needle in line]


# -- the estimator ---------------------------------------------------------------------


def test_exact_nearest_rank_quantiles() -> None:
    window = SlidingQuantiles()
    values = list(range(1, 101))
    random.Random(1).shuffle(values)
    for v in values:
        window.add(v, now=5.0)
    qs = [0.0, 0.01, 0.5, 0.9, 0.99, 1.0]
    assert window.quantiles(qs, now=5.0) == [1, 1, 50, 90, 99, 100]


def test_empty_window_is_nan() -> None:
    assert all(math.isnan(v) for v in SlidingQuantiles().quantiles([0.5, 0.99], now=0.0))


def test_values_leave_the_window_after_max_age() -> None:
    """60 s in 5 slices of 12 s: a value stays 48-60 s, then ages out."""
    window = SlidingQuantiles(max_age_s=60, age_buckets=5)
    window.add(7, now=0.0)  # slice [0, 12)
    window.add(100, now=30.0)  # slice [24, 36)
    assert window.quantiles([0.0, 1.0], now=47.9) == [7, 100]
    assert window.quantiles([0.0, 1.0], now=59.9) == [7, 100]  # 7's slice still in the window
    assert window.quantiles([0.0, 1.0], now=60.0) == [100, 100]  # ... and out at 60 s
    assert window.quantiles([0.0, 1.0], now=83.9) == [100, 100]
    assert all(math.isnan(v) for v in window.quantiles([0.5], now=84.0))
    # A slot is reused for a later interval: the old values are gone, not merged.
    window.add(3, now=120.0)  # same slot as t=0 (epoch 10 vs 0)
    assert window.quantiles([0.0, 1.0], now=120.0) == [3, 3]


def test_memory_is_bounded_and_a_sample_stays_representative() -> None:
    window = SlidingQuantiles(capacity=200, rng=random.Random(7))
    for v in range(100_000):
        window.add(v, now=1.0)
    kept = [s for s in window._slices if s.values is not None]
    assert len(kept) == 1 and len(kept[0].values or ()) == 200 and kept[0].seen == 100_000
    median, p90 = window.quantiles([0.5, 0.9], now=1.0)
    assert 40_000 < median < 60_000
    assert 82_000 < p90 < 97_000


def test_slices_of_different_rates_merge_by_weight() -> None:
    """A busy slice keeps a sample, a quiet one keeps all: each kept value stands for
    seen/kept values, so the busy slice is not under-represented."""
    window = SlidingQuantiles(capacity=10, rng=random.Random(3))
    for _ in range(10_000):
        window.add(1, now=1.0)  # 10 kept, weight 1000 each
    for _ in range(10):
        window.add(1000, now=13.0)  # next slice: 10 kept, weight 1 each
    assert window.quantiles([0.5, 0.99, 1.0], now=13.0) == [1, 1, 1000]


def test_histogram_buckets_are_upper_bounds() -> None:
    histogram = Histogram([5, 1, 10])
    for v in (0, 1, 2, 5, 11, 10):
        histogram.observe(v)
    assert histogram.bounds == (1, 5, 10)
    assert histogram.cumulative() == [2, 4, 5]
    assert (histogram.count, histogram.sum) == (6, 29)


# -- the observer hook -----------------------------------------------------------------


def test_no_observer_unless_a_factory_is_set() -> None:
    stats = ModelStats()
    assert stats.observer is None
    stats.record_success(1, 1, BatchTimings(0, 1, 2, 3))  # the off path still works


def test_observer_sees_what_model_stats_records(observed: Clock) -> None:
    stats = ModelStats()
    observer = stats.observer
    assert isinstance(observer, LatencyObserver)
    timings = BatchTimings(start=0, input_end=1_500, infer_end=11_500, end=12_000)
    stats.record_success(20_999, 3_000, timings)
    stats.record_cache_hit(4_000, 1_000)  # request and (zero) queue, no compute
    stats.record_request_success(9_001)  # decoupled: request only
    stats.record_failure(50_000)  # failures are not latency observations
    summaries = observer.summaries()
    assert summaries["request"] is not None and summaries["queue"] is not None
    assert (summaries["request"].count, summaries["request"].sum) == (3, stats.success.ns)
    assert (summaries["queue"].count, summaries["queue"].sum) == (2, stats.queue.ns)
    for part in ("compute_input", "compute_infer", "compute_output"):
        summary = summaries[part]
        assert summary is not None
        assert (summary.count, summary.sum) == (1, getattr(stats, part).ns), part
    assert observer.first_response is None  # histograms off


# -- the exposition text ----------------------------------------------------------------


def test_summary_text(observed: Clock) -> None:
    model = FakeModel("m", 1, ModelStats())
    renderer = MetricsRenderer(lambda: [model], latency=SUMMARIES)
    timings = BatchTimings(start=0, input_end=1_000, infer_end=11_000, end=11_500)
    for request_ns in (10_500, 30_000, 20_250):
        model.stats.record_success(request_ns, 2_000, timings)
    text = renderer.render().decode()
    assert "# TYPE nv_inference_request_summary_us summary" in text
    assert _lines(renderer, "nv_inference_request_summary_us") == [
        "# HELP nv_inference_request_summary_us Summary of inference request duration in "
        "microseconds (includes cached requests)",
        "# TYPE nv_inference_request_summary_us summary",
        f"nv_inference_request_summary_us_count{{{LABELS}}} 3",
        f"nv_inference_request_summary_us_sum{{{LABELS}}} 60.75",
        f'nv_inference_request_summary_us{{{LABELS},quantile="0.5"}} 20.25',
        f'nv_inference_request_summary_us{{{LABELS},quantile="0.9"}} 30',
        f'nv_inference_request_summary_us{{{LABELS},quantile="1"}} 30',
    ]
    # _sum is the exact sum; the counter is its whole microseconds.
    assert f"nv_inference_request_duration_us{{{LABELS}}} 60" in text
    assert f"nv_inference_compute_infer_summary_us_sum{{{LABELS}}} 30" in text
    assert f"nv_inference_compute_output_summary_us_sum{{{LABELS}}} 1.5" in text
    # The window slides while _count and _sum keep everything since start.
    observed.now += 61
    assert _lines(renderer, "nv_inference_request_summary_us")[2:5] == [
        f"nv_inference_request_summary_us_count{{{LABELS}}} 3",
        f"nv_inference_request_summary_us_sum{{{LABELS}}} 60.75",
        f'nv_inference_request_summary_us{{{LABELS},quantile="0.5"}} NaN',
    ]


def test_summaries_off_by_default(observed: Clock) -> None:
    model = FakeModel("m", 1, ModelStats())
    model.stats.record_success(1_000, 0, BatchTimings(0, 1, 2, 3))
    text = MetricsRenderer(lambda: [model]).render().decode()
    assert "summary" not in text and "histogram" not in text


def test_default_quantiles_are_triton_s() -> None:
    assert [q for q, _ in DEFAULT_QUANTILES] == [0.5, 0.9, 0.95, 0.99, 0.999]
    stats = ModelStats(observer=LatencyObserver(LatencyMetrics(summaries=True)))
    text = MetricsRenderer(
        lambda: [FakeModel("m", 1, stats)], latency=LatencyMetrics(summaries=True)
    ).render()
    for q in ("0.5", "0.9", "0.95", "0.99", "0.999"):
        assert f'nv_inference_queue_summary_us{{{LABELS},quantile="{q}"}} NaN' in text.decode()


def test_first_response_histogram_for_decoupled_models_only() -> None:
    config = LatencyMetrics(histograms=True)
    decoupled = mc.ModelConfig()
    decoupled.model_transaction_policy.decoupled = True
    stream = FakeModel("s", 1, ModelStats(observer=LatencyObserver(config)), config=decoupled)
    plain = FakeModel("p", 1, ModelStats(observer=LatencyObserver(config)))
    renderer = MetricsRenderer(lambda: [stream, plain], latency=config)
    ms = 1_000_000
    stream.stats.record_response(0, 150 * ms, 250_000, ok=True)  # first: 150.25 ms
    stream.stats.record_response(1, 900 * ms, 0, ok=True)  # not a first response
    stream.stats.record_response(0, 40 * ms, 0, ok=True, empty=True)  # 40 ms
    stream.stats.record_response(0, 0, 0, ok=False, cancelled=True)  # cancelled: none
    lab = 'model="s",version="1"'
    assert _lines(renderer, "first_response") == [
        "# HELP nv_inference_first_response_histogram_ms Duration from request to first "
        "response in milliseconds",
        "# TYPE nv_inference_first_response_histogram_ms histogram",
        f"nv_inference_first_response_histogram_ms_count{{{lab}}} 2",
        f"nv_inference_first_response_histogram_ms_sum{{{lab}}} 190.25",
        f'nv_inference_first_response_histogram_ms_bucket{{{lab},le="100"}} 1',
        f'nv_inference_first_response_histogram_ms_bucket{{{lab},le="500"}} 2',
        f'nv_inference_first_response_histogram_ms_bucket{{{lab},le="2000"}} 2',
        f'nv_inference_first_response_histogram_ms_bucket{{{lab},le="5000"}} 2',
        f'nv_inference_first_response_histogram_ms_bucket{{{lab},le="+Inf"}} 2',
    ]
    assert "summary" not in renderer.render().decode()


def test_counter_latencies_false_drops_the_duration_counters() -> None:
    model = FakeModel("m", 1, ModelStats())
    text = (
        MetricsRenderer(lambda: [model], cache_enabled=True, latency=LatencyMetrics(counters=False))
        .render()
        .decode()
    )
    assert "_duration_us" not in text and "nv_cache_" not in text
    assert f"nv_inference_request_success{{{LABELS}}} 0" in text


# -- --metrics-config ---------------------------------------------------------------------


def test_parse_metrics_config() -> None:
    assert parse_metrics_config([]) == LatencyMetrics()
    parsed = parse_metrics_config(
        [
            "summary_latencies=true",
            "histogram_latencies=TRUE",
            "counter_latencies=false",
            "summary_quantiles=0.5:0.05, 0.99:0.001",
        ]
    )
    assert parsed == LatencyMetrics(
        counters=False, histograms=True, summaries=True, quantiles=((0.5, 0.05), (0.99, 0.001))
    )
    assert parse_metrics_config(["summary_latencies=true", "summary_latencies=false"]) == (
        LatencyMetrics()
    )


@pytest.mark.parametrize(
    ("spec", "named"),
    [
        ("summary_latencies=yes", "summary_latencies"),
        ("histogram_latencies", "histogram_latencies"),
        ("summary_quantile=0.5:0.1", "summary_quantile"),
        ("summary_quantiles=", "summary_quantiles"),
        ("summary_quantiles=1.5:0.01", "summary_quantiles"),
        ("summary_quantiles=0.5", "summary_quantiles"),
        ("summary_quantiles=0.5:x", "summary_quantiles"),
        ("summary_quantiles=0.5:1", "summary_quantiles"),
        ("summary_quantiles=0.5:0.1,0.5:0.01", "summary_quantiles"),
        ("summary_max_age=30", "summary_max_age"),
    ],
)
def test_bad_metrics_config_stops_the_start(
    spec: str, named: str, capsys: pytest.CaptureFixture[str], tmp_path: object
) -> None:
    with pytest.raises(SystemExit) as info:
        parse_args(["--model-repository", str(tmp_path), "--metrics-config", spec])
    assert info.value.code == 2
    assert named in capsys.readouterr().err


def test_metrics_flags(tmp_path: object) -> None:
    config = parse_args(["--model-repository", str(tmp_path)])
    assert (config.metrics.gpu, config.metrics.interval_ms) == (True, 2000)
    assert config.metrics.latency == LatencyMetrics()
    config = parse_args(
        [
            "--model-repository",
            str(tmp_path),
            "--allow-gpu-metrics=false",
            "--metrics-interval-ms=500",
            "--metrics-config=summary_latencies=true",
        ]
    )
    assert (config.metrics.gpu, config.metrics.interval_ms) == (False, 500)
    assert config.metrics.latency.summaries
    with pytest.raises(SystemExit):
        parse_args(["--model-repository", str(tmp_path), "--metrics-interval-ms=0"])
