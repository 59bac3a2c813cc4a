"""The capacity model's rule and its reading of the 16-core report: the smallest bound
wins and is named, instance workers take the instance threads off the engine's GIL, and
the committed 16-core report still parses (the check reads it)."""

from __future__ import annotations

import pytest

from loadtest.scenario import parse
from loadtest.scenarios import capacity
from loadtest.scenarios.capacity import CORES16, Costs, predict, scaling_rows

ROLES = {
    "frontend loop (grpc.aio + ours)": 300.0,
    "frontend grpc threads": 60.0,
    "engine loop": 100.0,
    "engine instance threads": 50.0,
}


def test_the_engine_bounds_many_frontends_and_one_frontend_bounds_itself() -> None:
    costs = Costs.from_roles(ROLES)
    assert costs.engine_serial == 150.0 and costs.total == 510.0
    one = predict(costs, cores=16, frontends=1)
    assert one.limit == "1 frontend loop(s)" and one.req_s == pytest.approx(1e6 / 300)
    eight = predict(costs, cores=16, frontends=8)
    assert eight.limit == "the engine's GIL" and eight.req_s == pytest.approx(1e6 / 150)
    few = predict(costs, cores=2, frontends=8)
    assert few.limit == "2 cores" and few.req_s == pytest.approx(2e6 / 510)


def test_instance_workers_leave_only_the_loop_serial() -> None:
    costs = Costs.from_roles(ROLES, workers=True)
    assert costs.engine_serial == 100.0
    assert predict(costs, 64, 8).req_s == pytest.approx(1e4)


def test_the_16_core_report_parses() -> None:
    rows = scaling_rows(CORES16)
    assert rows[(1, "add_sub c=64")]["req_s"] > 0
    assert rows[(8, "add_sub c=64")]["engine_cores"] > 0


def test_options() -> None:
    args = parse(capacity.Capacity, ["--cores", "16", "--frontends", "1", "8", "--check"])
    assert args.cores == [16] and args.frontends == [1, 8] and args.check
