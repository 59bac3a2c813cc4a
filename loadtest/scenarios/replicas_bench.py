"""Replicas behind the shipped nginx balancer (deploy/nginx/, tests/replica_cluster.py):
throughput with 1, 2, 3 replicas of add_sub, and each request's CPU in the services and in
nginx (over the run / requests sent). ``direct`` is one replica without a balancer;
``nginx x1 per-request`` (no kept connections) and ``nginx x1 unbounded`` (kept without
the 300 ms bounds) are variants that do not ship. On few cores the figures show the
balancer's cost, not scaling.

    .venv/bin/python -m loadtest replicas-bench          # ~3 min; results/replicas_bench.md
    .venv/bin/python -m loadtest replicas-bench --quick  # ~40 s smoke run, prints only
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

from replica_cluster import Balancer, Cluster, Replica, find_nginx

from loadtest import RESULTS
from loadtest.loadgen import LoadSpec, run_load
from loadtest.metrics import tree_cpu_seconds
from loadtest.report import median, publish, table
from loadtest.repository import add_sub
from loadtest.scenario import Scenario, register, window_args

_BOUNDS = "        keepalive_time 300ms;\n        keepalive_timeout 300ms;\n"
_KEPT = "        keepalive 32;\n"
Row = dict[str, float]


def _cpu(pids: list[int]) -> float:
    return sum(tree_cpu_seconds(pid) or 0.0 for pid in pids)


def _variant(balancer: Balancer, name: str) -> None:
    """Rewrite the shipped configuration into a variant and reload nginx."""
    conf = balancer.dir / "nginx.conf"
    text = conf.read_text()
    assert _KEPT in text, "the template's keepalive lines changed"
    text = text.replace(_BOUNDS, "")
    conf.write_text(text.replace(_KEPT, "") if name == "per-request" else text)
    balancer.reload()


async def _measure(
    name: str, url: str, replicas: list[Replica], balancer: Balancer | None, spec: LoadSpec
) -> tuple[str, Row]:
    servers = [r.service.pid for r in replicas if r.service is not None]
    nginx = [balancer.pid] if balancer is not None else []  # its tree: master and workers
    before_s, before_n, load = _cpu(servers), _cpu(nginx), os.getloadavg()[0]
    result = await run_load(replace(spec, url=url))
    sent = max(result.sent, 1)
    row = {
        "replicas": len(replicas),
        "rps": result.req_per_s,
        "p50": result.latency_ms["p50"],
        "p99": result.latency_ms["p99"],
        "errors": result.errors,
        "service": (_cpu(servers) - before_s) / sent * 1000,
        "nginx": (_cpu(nginx) - before_n) / sent * 1000 if balancer else float("nan"),
        "client": result.client_cpu_cores,
        "load": load,  # 1-minute load average at the start: how busy the machine was
    }
    print(f"{name:>20}: " + ", ".join(f"{k} {v:.3f}" for k, v in row.items()), flush=True)
    return name, row


async def _round(spec: LoadSpec, repo: Path) -> list[tuple[str, Row]]:
    """One pass over every scenario; each cluster is started for its scenarios only."""
    rows = []
    for count in (1, 2, 3):
        replicas = [Replica([repo], gateway=False) for _ in range(count)]
        with Cluster(replicas) as cluster:
            balancer = cluster.balancer
            assert balancer is not None
            if count == 1:
                rows.append(await _measure("direct", replicas[0].grpc_url, replicas, None, spec))
            name = f"nginx x{count}"
            rows.append(await _measure(name, balancer.grpc_url, replicas, balancer, spec))
            for variant in ("unbounded", "per-request") if count == 1 else ():
                _variant(balancer, variant)
                name = f"nginx x1 {variant}"
                rows.append(await _measure(name, balancer.grpc_url, replicas, balancer, spec))
            for replica in replicas:
                codes = replica.stop()
                assert codes == [0], f"replica exited with {codes}"
    return rows


def _report(rounds: list[list[tuple[str, Row]]], spec: LoadSpec, args: argparse.Namespace) -> str:
    nginx = find_nginx()
    version = "none"
    if nginx is not None:
        done = subprocess.run([nginx, "-v"], capture_output=True, text=True)
        version = done.stderr.strip().removeprefix("nginx version: ")
    cells = []
    for i, (name, first) in enumerate(rounds[0]):
        med = {k: median(r[i][1][k] for r in rounds) for k in first}
        errors = sum(r[i][1]["errors"] for r in rounds)
        direct = median(r[0][1]["rps"] for r in rounds)
        cells.append(
            [
                *(name, int(first["replicas"]), f"{med['rps']:.0f}", f"{med['rps'] / direct:.2f}"),
                *(f"{med['p50']:.2f}", f"{med['p99']:.2f}", int(errors), f"{med['service']:.3f}"),
                *("-" if name == "direct" else f"{med['nginx']:.3f}", f"{med['client']:.2f}"),
                f"{med['load']:.1f}",
            ]
        )
    head = ["scenario", "replicas", "req/s", "vs direct", "p50 ms", "p99 ms", "errors"]
    head += ["service CPU ms/req", "nginx CPU ms/req", "client cores", "load avg"]
    lines = [
        "# Replicas behind nginx (python -m loadtest replicas-bench)",
        "",
        f"Command: `{args.command}` on {os.cpu_count()} cores ({platform.machine()}), nginx from "
        f"`{version}`; add_sub, concurrency {spec.concurrency}, {spec.duration:g} s windows "
        f"after {spec.warmup:g} s warm-up; median of {args.rounds} rounds. CPU per request: "
        "CPU time of the processes over the run / requests sent.",
        "",
        *table(head, cells),
        "",
        "The machine's cores are shared by the client, nginx and every replica: with more",
        "replicas than cores throughput cannot grow, so the rows show the balancer's cost",
        "(an extra hop; connections to the replicas) rather than scaling. `per-request` and",
        "`unbounded` are variants of the shipped configuration that do not ship (no kept",
        "connections; kept connections without the 300 ms bounds). `load avg`: the 1-minute",
        "load average when the scenario started; far above the core count, other work on the",
        "machine shares the cores and the figures are noisy (CPU per request less so).",
        "",
    ]
    return "\n".join(lines)


@register
class ReplicasBench(Scenario):
    """1, 2, 3 replicas behind the shipped nginx: throughput and CPU per request."""

    name = "replicas-bench"

    @staticmethod
    def add_cli_args(p: argparse.ArgumentParser) -> None:
        quick = {"duration": 2.0, "warmup": 0.5, "rounds": 1}
        window_args(
            p, 5.0, 1.0, rounds=3, concurrency=8, quick="one short round, no file",
            quick_values=quick,
        )  # fmt: skip

    @staticmethod
    def run(args: argparse.Namespace) -> int:
        if find_nginx() is None:
            print("nginx is not installed (apt-get install nginx)", file=sys.stderr)
            return 2
        spec = LoadSpec("", "add_sub", args.concurrency, args.duration, args.warmup)
        spec = replace(spec, max_requests=200_000)
        repo = Path(tempfile.mkdtemp(prefix="replicas-bench-"))
        try:
            add_sub(repo)
            rounds = []
            for number in range(args.rounds):
                print(f"round {number + 1}/{args.rounds}", flush=True)
                rounds.append(asyncio.run(_round(spec, repo)))
        finally:
            shutil.rmtree(repo, ignore_errors=True)
        publish(_report(rounds, spec, args), None if args.quick else RESULTS / "replicas_bench.md")
        return 1 if any(row["errors"] for r in rounds for _, row in r) else 0
