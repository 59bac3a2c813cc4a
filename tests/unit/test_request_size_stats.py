"""``ModelStats.request_sizes``: the requests of each batch size, as Triton 1.x's status
kept them for its ``infer_stats`` map (served by the legacy v1 API), always summing to the
version's totals that the v2 statistics extension reports."""

from __future__ import annotations

from service.core.index import IndexEntry
from service.core.inference_server import VersionStats
from service.grpc_frontend.v1_server_status import ApiStats, StatusFacts, server_status
from service.statistics import BatchTimings, ModelStats
from trtis import server_status_pb2 as ss

TIMINGS = BatchTimings(0, 10, 30, 60)


def _record_mixed(stats: ModelStats) -> None:
    stats.record_success(100, 7, TIMINGS, 4)
    stats.record_success(80, 5, TIMINGS, 4)
    stats.record_success(20, 1, TIMINGS, 1)
    stats.record_request_success(300, 2, TIMINGS, 3)  # a decoupled request
    stats.record_request_success(50)  # decoupled, its execution's timings unknown
    stats.record_cache_hit(15, 4, 2)
    stats.record_failure(30, "BACKEND", 4)
    stats.record_cancelled(6, 1)


def test_each_request_counts_under_its_batch_size() -> None:
    stats = ModelStats()
    _record_mixed(stats)
    sizes = stats.request_sizes
    assert sorted(sizes) == [1, 2, 3, 4]
    four = sizes[4]
    assert (four.success.count, four.success.ns) == (2, 180)
    assert (four.queue.count, four.queue.ns) == (2, 12)
    assert (four.compute.count, four.compute.ns) == (2, 120)
    assert (four.fail.count, four.fail.ns) == (1, 30)
    assert (sizes[1].success.count, sizes[1].fail.count, sizes[1].fail.ns) == (2, 1, 6)
    assert sizes[1].queue.count == sizes[1].compute.count == 1  # the timed one only
    assert (sizes[2].success.count, sizes[2].queue.count, sizes[2].compute.count) == (1, 1, 0)
    assert (sizes[3].compute.count, sizes[3].compute.ns) == (1, 60)


def test_sizes_sum_to_the_totals() -> None:
    stats = ModelStats()
    _record_mixed(stats)
    sizes = stats.request_sizes.values()
    assert sum(s.success.count for s in sizes) == stats.success.count == 6
    assert sum(s.success.ns for s in sizes) == stats.success.ns
    assert sum(s.fail.count for s in sizes) == stats.fail.count == 2
    assert sum(s.fail.ns for s in sizes) == stats.fail.ns
    assert sum(s.queue.count for s in sizes) == stats.queue.count
    assert sum(s.queue.ns for s in sizes) == stats.queue.ns
    assert sum(s.compute.count for s in sizes) == stats.compute_infer.count


def test_a_failure_of_unknown_size_counts_under_zero() -> None:
    stats = ModelStats()
    stats.record_failure(9)
    stats.record_cancelled()
    assert list(stats.request_sizes) == [0]
    assert stats.request_sizes[0].fail.count == 2


def _status(stats: ModelStats) -> ss.ModelVersionStatus:
    out = server_status(
        StatusFacts("inference:0", "9.9", ss.SERVER_READY, 1),
        [IndexEntry("m", "1", "READY", "")],
        {},
        [VersionStats("m", 1, stats)],
        ApiStats(),
    )
    return out.model_status["m"].version_status[1]


def test_v1_status_has_no_infer_stats_before_the_first_request() -> None:
    """Triton 1.x's qa (L0_server_status): a version never asked has no entry at all."""
    assert len(_status(ModelStats()).infer_stats) == 0


def test_v1_status_has_one_entry_per_batch_size() -> None:
    stats = ModelStats()
    _record_mixed(stats)
    version = _status(stats)
    assert sorted(version.infer_stats) == [1, 2, 3, 4]
    four = version.infer_stats[4]
    assert (four.success.count, four.success.total_time_ns) == (2, 180)
    assert (four.failed.count, four.failed.total_time_ns) == (1, 30)
    assert (four.queue.count, four.queue.total_time_ns) == (2, 12)
    assert (four.compute.count, four.compute.total_time_ns) == (2, 120)
    assert version.model_inference_count == 4 + 4 + 1 + 3 + 1  # cache hits infer nothing
