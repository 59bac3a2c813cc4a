"""cpu_bench.md: the per-request CPU table, the targets, latency, and per-thread detail."""

from __future__ import annotations

import argparse
import os
import statistics
from collections.abc import Sequence
from typing import Any

__all__ = ["render"]


def _median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def _cpu(server: Any, key: str) -> float:
    return _median([s.cpu_us for s in server.samples.get(key, [])])


def _rate(server: Any, key: str) -> float:
    return _median([s.req_s for s in server.samples.get(key, [])])


def _table(servers: Sequence[Any], workloads: Sequence[Any]) -> list[str]:
    bare, ours, *others = servers
    head = "| workload | concurrency | bare µs/req | ours µs/req | ours / bare |"
    rule = "|---|--:|--:|--:|--:|"
    for other in others:
        head += f" {other.label} µs/req |"
        rule += "--:|"
    rows = [head + " bare req/s | ours req/s |", rule + "--:|--:|"]
    for work in workloads:
        b, o = _cpu(bare, work.key), _cpu(ours, work.key)
        row = f"| {work.title} | {work.concurrency} | {b:.0f} | {o:.0f} | {o / b:.2f} |"
        row += "".join(f" {_cpu(other, work.key):.0f} |" for other in others)
        rows.append(row + f" {_rate(bare, work.key):.0f} | {_rate(ours, work.key):.0f} |")
    return rows


def _targets(servers: Sequence[Any], measured: set[str]) -> list[str]:
    """The issue's targets whose workloads this run measured (``--only`` leaves some out)."""
    bare, ours, *others = servers
    same_loop = next((o for o in others if o.label == "bare+uvloop"), None)
    unbatched, batched = _cpu(ours, "add_sub"), _cpu(ours, "add_sub_batch")
    ratio_a = unbatched / _cpu(bare, "add_sub")
    ratio_i = _cpu(ours, "identity_1m") / _cpu(bare, "identity_1m")
    # (target, measured, wanted, met, the workloads it needs)
    rows: list[tuple[str, str, str, bool, set[str]]] = [
        ("add_sub c=8: ours / bare", f"{ratio_a:.2f}", "≤ 1.15", ratio_a <= 1.15, {"add_sub"}),
        (
            "add_sub: batching c=32 vs unbatched c=8 (ours, µs/req)",
            f"{batched:.0f} vs {unbatched:.0f}",
            "batched ≤ unbatched",
            batched <= unbatched,
            {"add_sub", "add_sub_batch"},
        ),
        (
            "identity 1 MiB c=1: ours / bare",
            f"{ratio_i:.2f}",
            "≤ 1.30",
            ratio_i <= 1.30,
            {"identity_1m"},
        ),
    ]
    if same_loop is not None:  # the same yardstick on the loop ours runs on
        ratio_u = unbatched / _cpu(same_loop, "add_sub")
        ratio_ui = _cpu(ours, "identity_1m") / _cpu(same_loop, "identity_1m")
        rows.append(
            (
                "add_sub c=8: ours / bare+uvloop",
                f"{ratio_u:.2f}",
                "≤ 1.15",
                ratio_u <= 1.15,
                {"add_sub"},
            )
        )
        rows.append(
            (
                "identity 1 MiB c=1: ours / bare+uvloop",
                f"{ratio_ui:.2f}",
                "≤ 1.30",
                ratio_ui <= 1.30,
                {"identity_1m"},
            )
        )
    for other in others:
        if other.label.startswith("bare") or not (ours.p50_ms and other.p50_ms):
            continue
        p50_ours, p50_other = _median(ours.p50_ms), _median(other.p50_ms)
        rows.append(
            (
                f"add_sub p50 at c=1: ours vs {other.label} (ms)",
                f"{p50_ours:.3f} vs {p50_other:.3f}",
                f"≤ {other.label} + 0.1 ms",
                p50_ours <= p50_other + 0.1,
                set(),
            )
        )
    lines = ["| target | measured | wanted | met |", "|---|--:|---|:-:|"]
    lines += [
        f"| {n} | {v} | {w} | {'yes' if ok else 'NO'} |"
        for n, v, w, ok, needs in rows
        if needs <= measured
    ]
    return lines


FLOOR_ADDS = {
    "bare+thread": "the model in one thread fed by a queue, answers by call_soon_threadsafe",
    "bare+ort": "add_sub by an ONNX Runtime session (on the loop's thread)",
    "bare+thread+ort": "both: ONNX Runtime in one thread fed by a queue",
}


def _floors(servers: Sequence[Any]) -> list[str]:
    """What the least rule-abiding server costs, against the 1.15 x bare target."""
    bare, ours, *others = servers
    floors = [o for o in others if o.label in FLOOR_ADDS]
    if not floors:
        return []
    base, mine = _cpu(bare, "add_sub"), _cpu(ours, "add_sub")
    lines = [
        "## Floors under ours (add_sub c=8)",
        "",
        "The bare servicer on uvloop with only what this project's rules and backend add: "
        "a model may not run on the loop's thread, and add_sub is an ONNX model. Nothing "
        "else of ours (no configs, validation, schedulers, statistics).",
        "",
        "| server | what it adds to bare+uvloop | µs/req | / bare | ours / it |",
        "|---|---|--:|--:|--:|",
    ]
    for floor in floors:
        cost = _cpu(floor, "add_sub")
        lines.append(
            f"| {floor.label} | {FLOOR_ADDS[floor.label]} | {cost:.0f} | {cost / base:.2f} | "
            f"{mine / cost:.2f} |"
        )
    return [*lines, "", f"The target, 1.15 x bare, is {1.15 * base:.0f} µs/req.", ""]


def _threads(servers: Sequence[Any], workloads: Sequence[Any]) -> list[str]:
    """Per thread, µs of CPU per request (user + system), medians over rounds."""
    lines = [
        "| server | workload | thread | user µs/req | system µs/req |",
        "|---|---|---|--:|--:|",
    ]
    for server in servers:
        for work in workloads:
            samples = server.samples.get(work.key, [])
            names = sorted({n for s in samples for n in s.threads})
            for name in names:
                user = _median([s.threads[name][0] for s in samples if name in s.threads])
                system = _median([s.threads[name][1] for s in samples if name in s.threads])
                if user + system >= 1:
                    lines.append(
                        f"| {server.label} | {work.key} | {name} | {user:.0f} | {system:.0f} |"
                    )
    return lines


def render(
    servers: Sequence[Any],
    workloads: Sequence[Any],
    args: argparse.Namespace,
    client: str,
    command: str,
    commit: str,
) -> str:
    latency = []
    if any(s.p50_ms for s in servers):  # measured unless --only left it out
        latency = [
            "## Latency (Python grpc.aio client, closed loop, concurrency 1)",
            "",
            "| server | add_sub p50 at c=1 (ms) |",
            "|---|--:|",
            *(f"| {s.label} | {_median(s.p50_ms):.3f} |" for s in servers),
            "",
        ]
    rounds = [
        f"- {s.label}, {key}: " + ", ".join(f"{x.cpu_us:.0f}" for x in xs)
        for s in servers
        for key, xs in s.samples.items()
    ]
    unanswered = [
        f"- {s.label}, {key}: the client got {sum(x.answered for x in xs)} answers, the "
        f"server counted {sum(x.counted for x in xs)} successes"
        for s in servers
        for key, xs in s.samples.items()
        if sum(x.answered for x in xs) > sum(x.counted for x in xs)
    ]
    load = os.getloadavg()[0]
    lines = [
        "# Server CPU per request: ours vs a bare grpc.aio servicer",
        "",
        f"Command: `{command}`  ",
        f"Commit {commit}; {os.cpu_count()} CPUs; load average {load:.2f} at the end (other "
        f"work on the machine); client: {client}; {args.rounds} round(s) of "
        f"{args.duration:g} s per workload and server, order alternating; medians over rounds.",
        "",
        "Server CPU = user + system time of the server's process tree (/proc) over the "
        "window, divided by the successes the server itself counted (ModelStatistics). "
        "`bare` is `loadtest/bare_servicer.py`: grpc.aio, the generated stubs and numpy, "
        "nothing else, on asyncio's loop (the issue's yardstick); `bare+uvloop` is the same "
        "on uvloop, the loop our server runs on.",
        "",
        *_table(servers, workloads),
        "",
        "## Targets",
        "",
        *_targets(servers, {w.key for w in workloads}),
        "",
        *_floors(servers),
        *latency,
        "## Every round (µs/req)",
        "",
        *rounds,
    ]
    if unanswered:
        lines += ["", "Answers the server did not count as successes:", *unanswered]
    if args.threads:
        lines += ["", "## CPU per thread", "", *_threads(servers, workloads)]
    return "\n".join(lines) + "\n"
