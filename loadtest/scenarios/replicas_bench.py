"""Replicas behind the shipped nginx balancer: throughput with 1, 2, 3 replicas, and what
each request costs the servers and the balancer in CPU.

Starts N service processes (``python -m service``, add_sub from the default repository:
almost no compute, so the numbers are per-request overhead) and Debian's nginx with
deploy/nginx/nginx.conf.template rendered for them (tests/replica_cluster.py), all on
127.0.0.1, then drives ModelInfer closed-loop (``loadtest.loadgen``) through nginx. Scenarios:

- ``direct``: one replica, no balancer (the baseline);
- ``nginx xN``: N replicas behind the shipped configuration (connections to a replica
  are kept, each for at most 300 ms, so that a draining replica is left within its
  lame-duck second, deploy/nginx/README.md);
- ``nginx x1 per-request``: one replica, a variant that does not ship: no kept
  connections, every request opens its own;
- ``nginx x1 unbounded``: one replica, kept connections without the 300 ms bounds (not
  safe for drains: the price of the bounds is the difference to ``nginx x1``).

CPU per request is the CPU time (user + system, /proc) the service process trees and the
nginx processes (master and workers) used during the run divided by the requests sent.
On a machine with few cores more replicas cannot add throughput (the cores are shared);
the figures show what
the balancer costs, not how the service scales. Every run is bounded (duration and a
request cap) and touches only the loopback interface.

    .venv/bin/python -m loadtest replicas-bench          # ~3 min; results/replicas_bench.md
    .venv/bin/python -m loadtest replicas-bench --quick  # ~40 s smoke run, prints only
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from replica_cluster import Balancer, Cluster, Replica, find_nginx

from loadtest import RESULTS
from loadtest.loadgen import LoadResult, LoadSpec, run_load
from loadtest.metrics import tree_cpu_seconds
from loadtest.report import publish
from loadtest.repository import add_sub
from loadtest.scenario import Scenario, register

MAX_REQUESTS = 200_000


@dataclass(frozen=True)
class Row:
    scenario: str
    replicas: int
    req_per_s: float
    p50_ms: float
    p99_ms: float
    errors: int
    server_cpu_ms: float  # per request, all service processes
    nginx_cpu_ms: float | None  # per request, master + workers
    client_cores: float
    load_avg: float  # 1-minute load average at the start: how busy the machine was


def _cpu(pids: list[int]) -> float:
    return sum(tree_cpu_seconds(pid) or 0.0 for pid in pids)


_BOUNDS = "        keepalive_time 300ms;\n        keepalive_timeout 300ms;\n"
_KEPT = "        keepalive 32;\n"


def _variant(balancer: Balancer, name: str) -> None:
    """Rewrite the shipped configuration into a variant and reload nginx."""
    conf = balancer.dir / "nginx.conf"
    text = conf.read_text()
    assert _KEPT in text, "the template's keepalive lines changed"
    text = text.replace(_BOUNDS, "")
    if name == "per-request":
        text = text.replace(_KEPT, "")
    conf.write_text(text)
    balancer.reload()


async def _measure(
    name: str,
    url: str,
    replicas: list[Replica],
    balancer: Balancer | None,
    spec: LoadSpec,
) -> Row:
    servers = [r.service.pid for r in replicas if r.service is not None]
    nginx = [balancer.pid] if balancer is not None else []  # its tree: master and workers
    before_s, before_n = _cpu(servers), _cpu(nginx)
    load = os.getloadavg()[0]
    result: LoadResult = await run_load(replace(spec, url=url))
    used_s, used_n = _cpu(servers) - before_s, _cpu(nginx) - before_n
    sent = max(result.sent, 1)
    row = Row(
        scenario=name,
        replicas=len(replicas),
        req_per_s=result.req_per_s,
        p50_ms=result.latency_ms["p50"],
        p99_ms=result.latency_ms["p99"],
        errors=result.errors,
        server_cpu_ms=used_s / sent * 1000,
        nginx_cpu_ms=used_n / sent * 1000 if balancer is not None else None,
        client_cores=result.client_cpu_cores,
        load_avg=load,
    )
    print(
        f"{name:>20}: {row.req_per_s:7.0f} req/s  p50 {row.p50_ms:5.2f} ms  p99 "
        f"{row.p99_ms:6.2f} ms  errors {row.errors}  server {row.server_cpu_ms:.3f} ms/req  "
        f"nginx {_ms(row.nginx_cpu_ms)} ms/req  client {row.client_cores:.2f} cores",
        flush=True,
    )
    return row


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


async def _round(spec: LoadSpec, repo: Path) -> list[Row]:
    """One pass over every scenario; each cluster is started for its scenarios only."""
    rows = []
    for count in (1, 2, 3):
        replicas = [Replica([repo], gateway=False) for _ in range(count)]
        with Cluster(replicas) as cluster:
            assert cluster.balancer is not None
            if count == 1:
                rows.append(await _measure("direct", replicas[0].grpc_url, replicas, None, spec))
            rows.append(
                await _measure(
                    f"nginx x{count}", cluster.balancer.grpc_url, replicas, cluster.balancer, spec
                )
            )
            if count == 1:
                for variant in ("unbounded", "per-request"):
                    _variant(cluster.balancer, variant)
                    url = cluster.balancer.grpc_url
                    name = f"nginx x1 {variant}"
                    rows.append(await _measure(name, url, replicas, cluster.balancer, spec))
            for replica in replicas:
                codes = replica.stop()
                assert codes == [0], f"replica exited with {codes}"
    return rows


def _median_rows(rounds: list[list[Row]]) -> list[Row]:
    out = []
    for i, first in enumerate(rounds[0]):
        same = [r[i] for r in rounds]

        def med(get: Callable[[Row], float | None], same: list[Row] = same) -> float:
            return statistics.median(v for v in map(get, same) if v is not None)

        out.append(
            Row(
                scenario=first.scenario,
                replicas=first.replicas,
                req_per_s=med(lambda r: r.req_per_s),
                p50_ms=med(lambda r: r.p50_ms),
                p99_ms=med(lambda r: r.p99_ms),
                errors=sum(r.errors for r in same),
                server_cpu_ms=med(lambda r: r.server_cpu_ms),
                nginx_cpu_ms=None if first.nginx_cpu_ms is None else med(lambda r: r.nginx_cpu_ms),
                client_cores=med(lambda r: r.client_cores),
                load_avg=med(lambda r: r.load_avg),
            )
        )
    return out


def _report(rows: list[Row], spec: LoadSpec, rounds: int, command: str) -> str:
    direct = rows[0].req_per_s
    lines = [
        "# Replicas behind nginx (python -m loadtest replicas-bench)",
        "",
        f"Command: `{command}` on {os.cpu_count()} cores ({platform.machine()}), nginx from "
        f"`{_nginx_version()}`; add_sub, concurrency {spec.concurrency}, "
        f"{spec.duration:g} s windows after {spec.warmup:g} s warm-up; median of {rounds} "
        "rounds. CPU per request: CPU time of the processes over the run / requests sent.",
        "",
        "| scenario | replicas | req/s | vs direct | p50 ms | p99 ms | errors "
        "| service CPU ms/req | nginx CPU ms/req | client cores | load avg |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r.scenario} | {r.replicas} | {r.req_per_s:.0f} | {r.req_per_s / direct:.2f} "
            f"| {r.p50_ms:.2f} | {r.p99_ms:.2f} | {r.errors} | {r.server_cpu_ms:.3f} "
            f"| {_ms(r.nginx_cpu_ms)} | {r.client_cores:.2f} | {r.load_avg:.1f} |"
        )
    lines += [
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


def _nginx_version() -> str:
    nginx = find_nginx()
    if nginx is None:
        return "none"
    done = subprocess.run([nginx, "-v"], capture_output=True, text=True)
    return done.stderr.strip().removeprefix("nginx version: ")


async def main_async(args: argparse.Namespace) -> int:
    if find_nginx() is None:
        print("nginx is not installed (apt-get install nginx)", file=sys.stderr)
        return 2
    spec = LoadSpec(
        "",
        "add_sub",
        concurrency=args.concurrency,
        duration=args.duration,
        warmup=args.warmup,
        max_requests=MAX_REQUESTS,
    )
    repo = Path(tempfile.mkdtemp(prefix="replicas-bench-"))
    try:
        add_sub(repo)
        rounds = []
        for number in range(args.rounds):
            print(f"round {number + 1}/{args.rounds}", flush=True)
            rounds.append(await _round(spec, repo))
    finally:
        shutil.rmtree(repo, ignore_errors=True)
    rows = _median_rows(rounds)
    text = _report(rows, spec, args.rounds, args.command)
    publish(text, None if args.quick else RESULTS / "replicas_bench.md")
    return 1 if any(r.errors for r in rows) else 0


@register
class ReplicasBench(Scenario):
    """1, 2, 3 replicas behind the shipped nginx: throughput and CPU per request."""

    name = "replicas-bench"

    @staticmethod
    def add_cli_args(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--concurrency", type=int, default=8)
        parser.add_argument("--duration", type=float, default=5.0)
        parser.add_argument("--warmup", type=float, default=1.0)
        parser.add_argument("--rounds", type=int, default=3)
        parser.add_argument("--quick", action="store_true", help="one short round, no file")

    @staticmethod
    def run(args: argparse.Namespace) -> int:
        if args.quick:
            args.duration, args.warmup, args.rounds = 2.0, 0.5, 1
        started = time.monotonic()
        code = asyncio.run(main_async(args))
        print(f"took {time.monotonic() - started:.0f} s")
        return code
