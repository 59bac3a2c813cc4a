"""The markdown report of gateway_bench.py: real clients' ratios, the minimal-client
matrix, and REST throughput with one or two gateway worker processes."""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from gateway_clients import ClientRatio

if TYPE_CHECKING:
    from gateway_bench import Window

__all__ = ["TARGET_RATIO", "report"]

TARGET_RATIO = 1.5


def median(windows: Sequence[Window], value: Callable[[Window], float]) -> float:
    return statistics.median(value(w) for w in windows)


def p50(w: Window) -> float:
    return w.pct(50)


def p99(w: Window) -> float:
    return w.pct(99)


def mean(w: Window) -> float:
    return w.mean


def rps(w: Window) -> float:
    return w.rps


def _clients(clients: list[ClientRatio]) -> list[str]:
    lines = [
        "## Real clients, add_sub, concurrency 1 (the target)",
        "",
        f"Each client's p50 through the gateway against its own p50 over gRPC straight to the "
        f"service; target <= {TARGET_RATIO}x. Median over alternating rounds (p50 per round).",
        "",
        "| client | gRPC p50 µs | REST p50 µs | ratio | target | rounds |",
        "|---|---|---|---|---|---|",
    ]
    for ratio in clients:
        if ratio.missing:
            lines.append(f"| {ratio.client} | - | - | - | not measured: {ratio.missing} | 0 |")
            continue
        verdict = "met" if ratio.ratio <= TARGET_RATIO else "**NOT met**"
        lines.append(
            f"| {ratio.client} | {ratio.grpc:,.0f} | {ratio.http:,.0f} | {ratio.ratio:.2f}x | "
            f"{verdict} | {len(ratio.grpc_us)} |"
        )
    return [*lines, ""]


def _matrix(results: dict[tuple[str, int, str], list[Window]], rounds: int) -> list[str]:
    lines = [
        "## Minimal clients: where the gateway's time goes",
        "",
        "Both clients are small asyncio loops in one process (one keep-alive connection per "
        "REST worker, one grpc.aio channel), so client overhead is alike and small. "
        f"Median over {rounds} alternating rounds.",
        "",
        "| model | conc | path | req/s | p50 µs | p99 µs | mean µs | p50 ratio | mean ratio "
        "| service CPU µs/req | gateway CPU µs/req |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (model, conc, path), windows in results.items():
        direct = results.get((model, conc, "grpc"))
        lat50, lat_mean = median(windows, p50), median(windows, mean)
        ratio_p50 = ratio_mean = ""
        if direct and path != "grpc":
            ratio_p50 = f"{lat50 / median(direct, p50):.2f}x"
            ratio_mean = f"{lat_mean / median(direct, mean):.2f}x"
        reqs = sum(w.requests for w in windows)
        svc = sum(w.service_cpu_s for w in windows) / reqs * 1e6
        gw = sum(w.gateway_cpu_s for w in windows) / reqs * 1e6 if path != "grpc" else 0.0
        lines.append(
            f"| {model} | {conc} | {path} | {median(windows, rps):,.0f} | {lat50:,.0f} | "
            f"{median(windows, p99):,.0f} | {lat_mean:,.0f} | {ratio_p50} | {ratio_mean} | "
            f"{svc:,.0f} | {gw:,.0f} |"
        )
    return [*lines, ""]


def _workers(workers: dict[int, list[Window]], concurrency: int) -> list[str]:
    if not workers:
        return []
    lines = [
        f"## REST throughput by gateway worker processes (add_sub, binary, concurrency "
        f"{concurrency})",
        "",
        "`python -m gateway --workers N` in front of the same service; alternating rounds.",
        "",
        "| workers | req/s | p50 µs | p99 µs | gateway CPU µs/req | service CPU µs/req |",
        "|---|---|---|---|---|---|",
    ]
    for count, windows in sorted(workers.items()):
        reqs = sum(w.requests for w in windows)
        gw = sum(w.gateway_cpu_s for w in windows) / reqs * 1e6
        svc = sum(w.service_cpu_s for w in windows) / reqs * 1e6
        lines.append(
            f"| {count} | {median(windows, rps):,.0f} | {median(windows, p50):,.0f} | "
            f"{median(windows, p99):,.0f} | {gw:,.0f} | {svc:,.0f} |"
        )
    if len(workers) > 1:
        one, most = workers[min(workers)], workers[max(workers)]
        gain = median(most, rps) / median(one, rps)
        lines += ["", f"Throughput {max(workers)} / {min(workers)} workers: {gain:.2f}x."]
    return [*lines, ""]


def report(
    results: dict[tuple[str, int, str], list[Window]],
    clients: list[ClientRatio],
    workers: dict[int, list[Window]],
    args: argparse.Namespace,
    load_before: str,
    load_after: str,
) -> str:
    lines = [
        "# Gateway benchmark: REST through the gateway vs gRPC direct",
        "",
        f"Command: `{' '.join(['.venv/bin/python loadtest/gateway_bench.py', *sys.argv[1:]])}`",
        f"Machine: {os.cpu_count()} CPUs, {platform.python_implementation()} "
        f"{platform.python_version()}, {platform.machine()}; load average before the run: "
        f"{load_before}, after: {load_after}. Clients, gateway and service share these CPUs.",
        "",
        "The service runs in its default layout (one frontend per core); the gateway's hop to "
        + (
            "it is the service's local socket (`--grpc-local-socket`, as scripts/serve.sh runs "
            "them; `--transport grpc` measures the gRPC hop)."
            if args.transport == "local"
            else "it is gRPC (`--transport grpc`)."
        ),
        "",
        *_clients(clients),
        *_matrix(results, args.rounds),
        *_workers(workers, args.workers_concurrency),
    ]
    return "\n".join(lines).rstrip() + "\n"
