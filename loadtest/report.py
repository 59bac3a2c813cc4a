"""The benchmark's Markdown report, target ratios and plot, computed from one run's results.

Everything here is pure formatting of measured numbers, so that a report can be rebuilt from
``results.json`` without rerunning anything.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "PLOT_NAME",
    "Ratio",
    "ceiling_size",
    "compute_ratios",
    "cpu_budget",
    "markdown",
    "plot",
    "write_report",
]

RESULTS = Path(__file__).resolve().parent / "results"
PLOT_NAME = "throughput_p99.png"
BATCH_ON, BATCH_OFF = "mlp_batch", "mlp_nobatch"
MLP = (BATCH_OFF, BATCH_ON)

Row = dict[str, Any]  # one LoadResult.to_dict()


@dataclass(frozen=True)
class Ratio:
    """One target of the issue: the measured value, the target, and whether it is met."""

    key: str
    title: str
    value: float | None
    target: str
    met: bool | None
    detail: str


def _find(rows: Sequence[Row], model: str, concurrency: int) -> Row | None:
    return next(
        (
            r
            for r in rows
            if r["spec"]["model"] == model and r["spec"]["concurrency"] == concurrency
        ),
        None,
    )


def ceiling_size(mean_batch: float) -> int:
    """The ceiling's batch size that stands for a mean executed batch size."""
    return max(1, round(mean_batch))


def _fmt(x: float | None, digits: int = 2) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def compute_ratios(
    rows: Sequence[Row], ceiling: Sequence[dict[str, Any]], delay_us: int
) -> list[Ratio]:
    """(a) on/off throughput at max concurrency, (b) served / ceiling, (c) p99 cost at c=1."""
    concurrencies = sorted(
        {r["spec"]["concurrency"] for r in rows if r["spec"]["model"] == BATCH_ON}
    )
    lo, hi = concurrencies[0], concurrencies[-1]
    on_hi, off_hi = _find(rows, BATCH_ON, hi), _find(rows, BATCH_OFF, hi)
    on_lo, off_lo = _find(rows, BATCH_ON, lo), _find(rows, BATCH_OFF, lo)
    assert on_hi and off_hi and on_lo and off_lo
    out = []

    a = on_hi["infer_per_s"] / off_hi["infer_per_s"] if off_hi["infer_per_s"] else None
    out.append(
        Ratio(
            "a",
            f"batching on / off throughput at c={hi}",
            a,
            ">= 3.0",
            None if a is None else a >= 3.0,
            f"{on_hi['infer_per_s']:.1f} / {off_hi['infer_per_s']:.1f} infer/s",
        )
    )

    by_batch = {int(p["batch_size"]): float(p["samples_per_s"]) for p in ceiling}
    mean_batch = on_hi["mean_exec_batch"]
    if mean_batch is None:
        refs = ", ".join(
            f"vs ceiling@{b}: {on_hi['infer_per_s'] / s:.2f}" for b, s in sorted(by_batch.items())
        )
        b_val, b_detail = None, f"mean executed batch size unknown ({on_hi['stats_note']}); {refs}"
    else:
        size = ceiling_size(mean_batch)
        b_val = on_hi["infer_per_s"] / by_batch[size] if size in by_batch else None
        b_detail = (
            f"{on_hi['infer_per_s']:.1f} infer/s served vs {by_batch.get(size, float('nan')):.1f} "
            f"samples/s in-process at batch {size} (mean executed batch {mean_batch:.2f})"
        )
    out.append(
        Ratio(
            "b",
            f"served with batching (c={hi}) / in-process ceiling at the mean executed batch size",
            b_val,
            ">= 0.80",
            None if b_val is None else b_val >= 0.8,
            b_detail,
        )
    )

    budget = delay_us / 1000 + 2.0
    p99_on, p99_off = on_lo["latency_ms"]["p99"], off_lo["latency_ms"]["p99"]
    c = p99_on - p99_off
    out.append(
        Ratio(
            "c",
            f"p99 at c={lo}: batching on minus off (ms)",
            c,
            f"<= max_queue_delay + 2 ms = {budget:.1f} ms",
            None if math.isnan(c) else c <= budget,
            f"p99 {p99_on:.2f} ms on vs {p99_off:.2f} ms off "
            f"(p50: {on_lo['latency_ms']['p50'] - off_lo['latency_ms']['p50']:+.2f} ms)",
        )
    )
    return out


def cpu_budget(
    rows: Sequence[Row], ceiling: Sequence[dict[str, Any]], cores: int | None
) -> list[str]:
    """Why ratio (b) is what it is: the CPU the cores must share, from this run's numbers.

    Model CPU per sample is the ceiling's (``threads / samples_per_s``, its threads fully
    busy); serving CPU per request is what the server and the client spent beyond that.
    When model and serving share ``cores``, served throughput is at most
    ``cores / (model + serving)``, i.e. ``served / ceiling <= cores / (threads + K * o)``
    with K the ceiling's rate and o the serving CPU per request.
    """
    hi = max((r["spec"]["concurrency"] for r in rows if r["spec"]["model"] == BATCH_ON), default=0)
    on = _find(rows, BATCH_ON, hi)
    if not on or not cores or on["mean_exec_batch"] is None:
        return []
    size = ceiling_size(on["mean_exec_batch"])
    point = next((p for p in ceiling if int(p["batch_size"]) == size), None)
    server, client, rate = on["server_cpu_cores"], on["client_cpu_cores"], on["req_per_s"]
    if point is None or server is None or client is None or rate <= 0:
        return []
    k, threads = float(point["samples_per_s"]), int(point["threads"])
    model_ms = threads / k * 1e3
    serving_ms = (server + client) / rate * 1e3 - model_ms
    bound = cores / (threads + k * serving_ms / 1e3)
    needed_ms = (cores / 0.8 - threads) / k * 1e3
    return [
        f"At c={hi} with batching, server and client used {server + client:.2f} of "
        f"{cores} cores for {rate:.1f} req/s: {(server + client) / rate * 1e3:.3f} ms of CPU "
        f"per request. The model itself needs {model_ms:.3f} ms per sample (the ceiling's "
        f"{threads} threads at {k:.1f} samples/s), which leaves {serving_ms:.3f} ms per request "
        f"of serving (gRPC in both processes, decoding, batching, hand-offs; client "
        f"{client / rate * 1e3:.3f} ms). With model and serving sharing {cores} cores, "
        f"served / ceiling cannot exceed {cores} / ({threads} + {k:.0f} x {serving_ms / 1e3:.5f})"
        f" = {bound:.2f} (measured {rate / k:.2f}); reaching 0.80 would need serving at "
        f"{needed_ms:.3f} ms per request or less, or a model that needs more CPU per sample.",
    ]


def _load_table(rows: Sequence[Row]) -> list[str]:
    lines = [
        "| model | c | req/s | infer/s | p50 ms | p90 ms | p99 ms | errors | mean exec batch "
        "| exec ms | client CPU cores | server CPU cores | others' CPU cores | server CPU ms/req "
        "| counted |",
        "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for r in rows:
        lat = r["latency_ms"]
        cap = " (capped)" if r["capped"] else ""
        server, rate = r["server_cpu_cores"], r["req_per_s"]
        per_req = server * 1e3 / rate if server is not None and rate > 0 else None
        lines.append(
            f"| {r['spec']['model']} | {r['spec']['concurrency']} | {r['req_per_s']:.1f} "
            f"| {r['infer_per_s']:.1f} | {_fmt(lat['p50'])} | {_fmt(lat['p90'])} "
            f"| {_fmt(lat['p99'])} | {r['errors']} | {_fmt(r['mean_exec_batch'])} "
            f"| {_fmt(r.get('mean_exec_ms'), 3)} | {_fmt(r['client_cpu_cores'])} "
            f"| {_fmt(server)} | {_fmt(r['other_cpu_cores'])} "
            f"| {_fmt(per_req, 3)} "
            f"| {r['requests']}{cap} |"
        )
    return lines


def markdown(
    *,
    rows: Sequence[Row],
    ceiling: Sequence[dict[str, Any]],
    ratios: Sequence[Ratio],
    settings: dict[str, Any],
    machine: dict[str, Any],
    command: str,
    plot_name: str,
    server_exit: int,
    notes: Sequence[str] = (),
) -> str:
    """The whole report.md text."""
    mlp = [r for r in rows if r["spec"]["model"] in MLP]
    other = [r for r in rows if r not in mlp]
    out = ["# Load test: dynamic batching", "", f"Run: {settings['mode']}.", ""]
    out += [f"Command (from the repository root): `{command}`", ""]
    out += ["## Target ratios", "", "| | ratio | value | target | met | detail |"]
    out += ["|---|---|--:|---|---|---|"]
    for r in ratios:
        met = "n/a" if r.met is None else ("yes" if r.met else "**no**")
        out.append(f"| ({r.key}) | {r.title} | {_fmt(r.value)} | {r.target} | {met} | {r.detail} |")
    budget = cpu_budget(rows, ceiling, machine.get("nproc"))
    if budget:
        out += ["", "### Where the CPU goes (ratio b)", "", *budget]
    label = settings.get("MLP", "3 x 1024 FP32")
    out += ["", f"## MLP {label}, batch 1 per request: batching off vs on", ""]
    out += _load_table(sorted(mlp, key=lambda r: (r["spec"]["concurrency"], r["spec"]["model"])))
    out += ["", "## add_sub (per-request overhead, [1, 16] FP32 x 2)", ""]
    out += _load_table(other)
    out += ["", f"## In-process onnxruntime ceiling ({ceiling[0]['threads']} intra-op threads)", ""]
    out += ["| batch | samples/s | ms/run | runs |", "|--:|--:|--:|--:|"]
    for p in ceiling:
        rate, ms = p["samples_per_s"], p["ms_per_run"]
        out.append(f"| {p['batch_size']} | {rate:.1f} | {ms:.3f} | {p['runs']} |")
    out += ["", f"![throughput and p99 vs concurrency]({plot_name})", "", "## Settings", ""]
    out += [f"- {k}: {v}" for k, v in settings.items()]
    out += [f"- server exit code after SIGTERM: {server_exit}", "", "## Machine", ""]
    out += [f"- {k}: {v}" for k, v in machine.items()]
    out += ["", "## Reading the numbers", ""]
    out += [
        "- req/s counts requests that completed successfully inside the measured window; "
        "infer/s = req/s x the batch each request carries (1 here).",
        "- p50/p90/p99: client-side latency of those requests (send to response), in ms.",
        "- mean exec batch: delta inference_count / delta execution_count from ModelStatistics "
        "over the window; n/a when the server does not implement the statistics extension. "
        "exec ms: the model's compute time per execution in the server (batch_stats "
        "compute_infer over executions), to hold against the ceiling's ms/run at that batch.",
        "- client/server CPU: cores busy in the client processes / the server process during "
        "the window (/proc). A client near 1.0 per process means the client may be the limit. "
        "others' CPU: cores busy outside the client and the server (other processes, kernel; "
        "/proc/stat): the noise. "
        "server CPU ms/req = server CPU cores / req/s: the server's CPU cost of one request.",
        "- ceiling: back-to-back `session.run` in one process on an otherwise idle machine, "
        "with the intra-op threads the server gives a one-instance model (all cores) and "
        "onnxruntime's defaults otherwise (its workers spin between runs; the server's do "
        "not unless the config sets allow_spinning).",
        *(f"- {n}" for n in notes),
    ]
    return "\n".join(out) + "\n"


def _ceiling_lines(ax: Any, rows: Sequence[Row], ceiling: Sequence[dict[str, Any]]) -> None:
    """Ceiling at batching-on's mean executed batch per concurrency, else one line per size."""
    by_batch = {int(p["batch_size"]): float(p["samples_per_s"]) for p in ceiling}
    on = sorted(
        (r["spec"]["concurrency"], r["mean_exec_batch"])
        for r in rows
        if r["spec"]["model"] == BATCH_ON
    )
    if on and all(b is not None and ceiling_size(b) in by_batch for _, b in on):
        ys = [by_batch[ceiling_size(b)] for _, b in on]
        ax.plot([c for c, _ in on], ys, "k--", lw=1, label="in-process at batching-on mean batch")
        return
    for size, rate in sorted(by_batch.items()):
        ax.axhline(rate, ls=":", lw=1, color="grey")
        ax.annotate(f"in-process, batch {size}", (1, rate), fontsize=7, color="grey", va="bottom")


def plot(rows: Sequence[Row], ceiling: Sequence[dict[str, Any]], path: Path, title: str) -> None:
    """Throughput and p99 vs concurrency, batching on vs off (Agg backend: no display)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator, ScalarFormatter

    fig, (ax_t, ax_p) = plt.subplots(1, 2, figsize=(11, 4.2))
    cs: list[int] = []
    for model, label, style in ((BATCH_OFF, "batching off", "o-"), (BATCH_ON, "batching on", "s-")):
        pts = sorted(
            (r["spec"]["concurrency"], r["infer_per_s"], r["latency_ms"]["p99"])
            for r in rows
            if r["spec"]["model"] == model
        )
        cs = [p[0] for p in pts]
        ax_t.plot(cs, [p[1] for p in pts], style, label=label)
        ax_p.plot(cs, [p[2] for p in pts], style, label=label)
    _ceiling_lines(ax_t, rows, ceiling)
    for ax, ylabel in ((ax_t, "inferences/s, log scale"), (ax_p, "p99 latency (ms), log scale")):
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_locator(FixedLocator(cs))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.xaxis.set_major_formatter(ScalarFormatter())
        ax.set_xlabel("concurrency (closed-loop clients)")
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    ax_t.set_yscale("log")
    ax_p.set_yscale("log")
    plain = FuncFormatter(lambda v, _: f"{v:g}")
    some = FuncFormatter(lambda v, _: f"{v:g}" if f"{v:g}"[0] in "25" else "")
    for ax in (ax_t, ax_p):  # plain numbers on the log axes, minor ticks 2x and 5x labelled
        ax.yaxis.set_major_formatter(plain)
        ax.yaxis.set_minor_formatter(some)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    """Re-render report.md and the plot from a results.json written by run_all.py."""
    import argparse
    import json

    p = argparse.ArgumentParser(description=main.__doc__)
    p.add_argument("results", type=Path, nargs="?", default=RESULTS / "results.json")
    args = p.parse_args(argv)
    raw = json.loads(args.results.read_text(encoding="utf-8"))
    write_report(raw, args.results.parent)
    return 0


def write_report(raw: dict[str, Any], out_dir: Path) -> None:
    """report.md and the plot from the raw results run_all.py stores in results.json."""
    rows, ceiling = raw["rows"], raw["ceiling"]
    ratios = compute_ratios(rows, ceiling, raw["delay_us"])
    plot(rows, ceiling, out_dir / PLOT_NAME, raw["title"])
    text = markdown(
        rows=rows,
        ceiling=ceiling,
        ratios=ratios,
        settings=raw["settings"],
        machine=raw["machine"],
        command=raw["command"],
        plot_name=PLOT_NAME,
        server_exit=raw["server_exit"],
        notes=raw["notes"],
    )
    (out_dir / "report.md").write_text(text, encoding="utf-8")


if __name__ == "__main__":
    sys.exit(main())
