"""Throughput on N cores predicted from what each process role costs per request.

The per-role CPU of ``cost-budget`` (µs per request, ``results/cost_budget.json``) splits
into what can run in parallel and what cannot. The engine is one CPython process: its
loop thread and its instance threads share one GIL, so it carries at most one core's
worth of their Python per second, whatever the cores (with instance worker processes,
decision 030, only its loop stays serial). Each frontend's loop thread is serial in the
same way, and there are F of them. Everything together, plus the client on the same
machine, shares the N cores. So

    req/s(N, F) = min(1e6 / engine serial µs, F * 1e6 / frontend loop µs,
                      N * 1e6 / (all roles µs + client µs))

and the smallest term names the limit. ``--check`` applies the same rule to the 16-core
figures in ``results/cores16/scaling_engine.md`` (taken from the ``--frontends 1`` rows,
predicting the ``--frontends 8`` ones), so the model is judged against a measurement
before its predictions are read.

    .venv/bin/python -m loadtest capacity                       # results/capacity.md
    .venv/bin/python -m loadtest capacity --cores 16 64 --frontends 1 8 16 --check
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from statistics import median

from loadtest import RESULTS
from loadtest.report import command, publish, table
from loadtest.scenario import Scenario, register

BUDGET = RESULTS / "cost_budget.json"
CORES16 = RESULTS / "cores16" / "scaling_engine.md"
FRONTEND_LOOP = "frontend loop (grpc.aio + ours)"
INSTANCE = "engine instance threads"


@dataclass(frozen=True)
class Costs:
    """µs per request: the engine's serial part, the frontends' loops, everything."""

    engine_serial: float
    frontend_loop: float
    total: float

    @classmethod
    def from_roles(cls, roles: Mapping[str, float], *, workers: bool = False) -> Costs:
        engine = roles.get("engine loop", 0.0)
        if not workers:  # the instance threads run their Python under the engine's GIL
            engine += roles.get(INSTANCE, 0.0)
        return cls(engine, roles.get(FRONTEND_LOOP, 0.0), sum(roles.values()))


@dataclass(frozen=True)
class Prediction:
    req_s: float
    limit: str


def predict(costs: Costs, cores: int, frontends: int, client_us: float = 0.0) -> Prediction:
    """The rule above; ``frontends`` 0 is one process, whose one loop carries it all."""
    if frontends == 0:
        serial = costs.engine_serial + costs.frontend_loop
        bounds = {"the one process's GIL": 1e6 / serial if serial else float("inf")}
    else:
        bounds = {
            "the engine's GIL": 1e6 / costs.engine_serial if costs.engine_serial else float("inf"),
            f"{frontends} frontend loop(s)": frontends * 1e6 / costs.frontend_loop
            if costs.frontend_loop
            else float("inf"),
        }
    bounds[f"{cores} cores"] = cores * 1e6 / (costs.total + client_us)
    limit = min(bounds, key=lambda k: bounds[k])
    return Prediction(bounds[limit], limit)


def budget_roles(path: Path) -> dict[str, dict[str, float]]:
    """Each workload's roles (median over its windows) from a cost-budget JSON file."""
    raw = json.loads(path.read_text(encoding="utf-8"))
    out: dict[str, dict[str, float]] = {}
    for key, windows in raw.items():
        names = {name for w in windows for name in w["roles"]}
        out[key] = {n: median(w["roles"].get(n, 0.0) for w in windows) for n in names}
    return out


_CELL = r"\s*([\d.]+)\s*\|"
_ROW = re.compile(r"^\|\s*(\d+)\s*\|\s*([^|]+?)\s*\|\s*([\d,]+)\s*\|" + _CELL * 5)


def scaling_rows(path: Path) -> dict[tuple[int, str], dict[str, float]]:
    """(frontends, scenario) -> req/s, server ms/req, engine cores, its loop's cores,
    others' cores, from a scaling-bench report with the engine's columns."""
    rows = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        found = _ROW.match(line)
        if found:
            f, label, rps, ms, _, engine, loop, others = found.groups()
            rows[(int(f), label)] = {
                "req_s": float(rps.replace(",", "")),
                "server_us": float(ms) * 1e3,
                "engine_cores": float(engine),
                "loop_cores": float(loop),
                "others_cores": float(others),
            }
    return rows


def check_lines(path: Path, loop_share: float, cores: int = 16) -> list[str]:
    """Predict each ``--frontends 8`` row from its ``--frontends 1`` row of ``path``."""
    rows = scaling_rows(path)
    out = []
    for (frontends, label), one in sorted(rows.items()):
        eight = rows.get((8, label))
        if frontends != 1 or eight is None:
            continue
        engine_us = one["engine_cores"] / one["req_s"] * 1e6
        frontend_us = one["server_us"] - engine_us
        client_us = one["others_cores"] / one["req_s"] * 1e6
        costs = Costs(engine_us, frontend_us * loop_share, one["server_us"])
        first = predict(costs, cores, 1, client_us)
        guess = predict(costs, cores, 8, client_us)
        out.append(
            [label, f"{one['req_s']:,.0f}", f"{first.req_s:,.0f}", f"{eight['req_s']:,.0f}",
             f"{guess.req_s:,.0f}", f"{guess.req_s / eight['req_s']:.2f}", guess.limit]
        )  # fmt: skip
    head = ["scenario", "F=1 measured", "F=1 model", "F=8 measured", "F=8 model",
            "model / measured", "limit (model)"]  # fmt: skip
    return table(head, out, "lrrrrrl")


def loop_share(roles: Mapping[str, Mapping[str, float]], key: str = "add_sub") -> float:
    """Of a frontend's CPU, the share of its loop thread (the serial part), from the budget."""
    mine = roles.get(key, {})
    frontend = sum(v for k, v in mine.items() if k.startswith("frontend"))
    return mine.get(FRONTEND_LOOP, 0.0) / frontend if frontend else 0.75


def report(args: argparse.Namespace, roles: Mapping[str, Mapping[str, float]]) -> str:
    lines = [
        "# Capacity: throughput on N cores from the cost per role",
        "",
        f"Command: `{command(sys.argv[1:])}`  ",
        f"Per-role costs: `{_shown(args.budget)}` (cost-budget, this machine); the rule in "
        "`loadtest/scenarios/capacity.py`: req/s = min(1e6 / engine serial µs, F x 1e6 / "
        "frontend loop µs, N x 1e6 / all µs); the client's own cost is left out of the "
        "predictions (a client on other machines). Machines differ in speed, so the ratios "
        "between layouts carry over better than the rates.",
        "",
    ]
    for workers in (False, True) if args.workers else (False,):
        title = "instances in worker processes" if workers else "instances in threads (default)"
        lines += [f"## {title}", ""]
        head = ["workload", "cores", *(f"--frontends {f}" for f in args.frontends)]
        if 1 in args.frontends and 8 in args.frontends:
            head.append("8 / 1")
        rows = []
        for key, mine in roles.items():
            costs = Costs.from_roles(mine, workers=workers)
            for cores in args.cores:
                cells = {f: predict(costs, cores, f) for f in args.frontends}
                row = [key, str(cores)] + [
                    f"{cells[f].req_s:,.0f} ({cells[f].limit})" for f in args.frontends
                ]
                if 1 in cells and 8 in cells:
                    row.append(f"{cells[8].req_s / cells[1].req_s:.2f}")
                rows.append(row)
        lines += [*table(head, rows, "lr" + "r" * (len(head) - 2)), ""]
    if args.check:
        share = loop_share(roles)
        lines += [
            "## The model against the 16-core measurement",
            "",
            f"`{_shown(args.check_file)}`: each `--frontends 1` row (engine cores and server CPU "
            "per request, the client's cores) predicts its `--frontends 8` row on 16 cores; "
            f"the frontends' serial share is their loop threads' share here ({share:.2f}).",
            "",
            *check_lines(args.check_file, share),
            "",
        ]
    return "\n".join(lines)


def _shown(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(RESULTS.parent.parent))
    except ValueError:
        return path.name


@register
class Capacity(Scenario):
    """Throughput on N cores predicted from cost-budget's per-role costs (no load run)."""

    name = "capacity"

    @staticmethod
    def add_cli_args(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--budget", type=Path, default=BUDGET, help="cost-budget JSON")
        parser.add_argument("--cores", type=int, nargs="+", default=[2, 16, 64])
        parser.add_argument("--frontends", type=int, nargs="+", default=[1, 2, 8, 16])
        parser.add_argument("--workers", action="store_true", help="also instance workers")
        parser.add_argument("--check", action="store_true", help="against cores16's figures")
        parser.add_argument("--check-file", type=Path, default=CORES16)
        parser.add_argument("--out", type=Path, default=None)
        parser.set_defaults(quick_values={})

    @staticmethod
    def run(args: argparse.Namespace) -> int:
        roles = budget_roles(args.budget)
        publish(report(args, roles), args.out or RESULTS / "capacity.md")
        return 0
