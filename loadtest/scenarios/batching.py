"""Does dynamic batching pay, and what does serving cost: every ratio from one run.

The MLP (3 x 1024 FP32 by default) without and with dynamic_batching, then add_sub, all
closed-loop against one server; then, with the server gone, the in-process ceiling.
Writes report.md, throughput_p99.png and results.json (loadtest/README.md).

    .venv/bin/python -m loadtest batching            # full run, about 5 minutes
    .venv/bin/python -m loadtest batching --quick    # smoke run, under 90 s
    .venv/bin/python -m loadtest batching --render loadtest/results/results.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, NamedTuple

import grpc
import numpy as np
from models import mlp_model, mlp_reference
from server_process import ServerProcess

from inference import grpc_service_pb2_grpc as pb_grpc
from loadtest import RESULTS
from loadtest.ceiling import measure_ceiling
from loadtest.loadgen import CHANNEL_OPTIONS, LoadSpec, infer_request, run_load
from loadtest.report import fmt, loadavg, machine_info, plot, table, write_json
from loadtest.repository import add_sub, batching, onnx_model, parameters
from loadtest.scenario import Scenario, register, window_args

WIDTH, LAYERS, MAX_BATCH = 1024, 3, 64
BATCH_ON, BATCH_OFF = "mlp_batch", "mlp_nobatch"
MLP_MODELS = (BATCH_OFF, BATCH_ON)
PLOT_NAME = "throughput_p99.png"
Row = dict[str, Any]  # one LoadResult.to_dict()
Points = Sequence[dict[str, Any]]  # CeilingPoint.to_dict() per batch size


def build_repository(
    root: Path, delay_us: int, params: dict[str, str], width: int = WIDTH, layers: int = LAYERS
) -> Path:
    """mlp_nobatch, mlp_batch (``params`` in both configs) and add_sub; the MLP's file."""
    model = mlp_model(width=width, layers=layers, seed=0)
    io = ([("INPUT0", "FP32", [width])], [("OUTPUT0", "FP32", [width])])
    for name, extra in zip(MLP_MODELS, ("", batching(delay_us)), strict=True):
        path = onnx_model(
            root, name, model, *io, max_batch_size=MAX_BATCH, extra=parameters(params) + extra
        )
    add_sub(root)
    return path


async def check_outputs(url: str, width: int, layers: int) -> None:
    """One request per MLP model against the numpy reference: wrong answers fast are not
    throughput."""
    x = np.random.default_rng(0).standard_normal((1, width)).astype(np.float32)
    async with grpc.aio.insecure_channel(url, options=CHANNEL_OPTIONS) as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        for model in MLP_MODELS:
            reply = await stub.ModelInfer(infer_request(model, {"INPUT0": x}), timeout=30)
            y = np.frombuffer(reply.raw_output_contents[0], "<f4").reshape(1, width)
            if not np.allclose(y, mlp_reference(x, width=width, layers=layers), 1e-4, 1e-4):
                raise RuntimeError(f"{model}: served output differs from the numpy reference")


async def run_scenarios(base: LoadSpec, concurrencies: list[int]) -> list[Row]:
    """MLP off/on interleaved per concurrency (slow drift hits both alike), then add_sub."""
    rows = []
    cases = [(m, c) for c in concurrencies for m in MLP_MODELS] + [("add_sub", 1), ("add_sub", 8)]
    for model, c in cases:
        result = await run_load(replace(base, model=model, concurrency=c))
        print(f"  {result.summary()}", file=sys.stderr, flush=True)
        if result.first_error:
            print(f"    first error: {result.first_error}", file=sys.stderr)
        rows.append(result.to_dict())
    return rows


def _find(rows: Sequence[Row], model: str, concurrency: int) -> Row | None:
    key = (model, concurrency)
    return next((r for r in rows if (r["spec"]["model"], r["spec"]["concurrency"]) == key), None)


def ceiling_size(mean_batch: float) -> int:
    """The ceiling's batch size that stands for a mean executed batch size."""
    return max(1, round(mean_batch))


class Ratio(NamedTuple):
    """One target of the issue: the measured value, the target, and whether it is met."""

    key: str
    title: str
    value: float | None
    target: str
    met: bool | None
    detail: str


def compute_ratios(rows: Sequence[Row], ceiling: Points, delay_us: int) -> list[Ratio]:
    """(a) on/off throughput at max concurrency, (b) served / ceiling, (c) p99 cost at c=1."""
    cs = sorted({r["spec"]["concurrency"] for r in rows if r["spec"]["model"] == BATCH_ON})
    lo, hi = cs[0], cs[-1]
    on_hi, off_hi = _find(rows, BATCH_ON, hi), _find(rows, BATCH_OFF, hi)
    on_lo, off_lo = _find(rows, BATCH_ON, lo), _find(rows, BATCH_OFF, lo)
    assert on_hi and off_hi and on_lo and off_lo
    served = on_hi["infer_per_s"]
    a = served / off_hi["infer_per_s"] if off_hi["infer_per_s"] else None
    by_batch = {int(p["batch_size"]): float(p["samples_per_s"]) for p in ceiling}
    mean_batch, b = on_hi["mean_exec_batch"], None
    if mean_batch is None:
        refs = ", ".join(f"vs ceiling@{k}: {served / v:.2f}" for k, v in sorted(by_batch.items()))
        b_detail = f"mean executed batch size unknown ({on_hi['stats_note']}); {refs}"
    else:
        size = ceiling_size(mean_batch)
        b = served / by_batch[size] if size in by_batch else None
        b_detail = (
            f"{served:.1f} infer/s served vs {by_batch.get(size, float('nan')):.1f} samples/s "
            f"in-process at batch {size} (mean executed batch {mean_batch:.2f})"
        )
    budget = delay_us / 1000 + 2.0
    p99_on, p99_off = on_lo["latency_ms"]["p99"], off_lo["latency_ms"]["p99"]
    c = p99_on - p99_off
    p50 = on_lo["latency_ms"]["p50"] - off_lo["latency_ms"]["p50"]
    return [
        Ratio(
            "a", f"batching on / off throughput at c={hi}", a, ">= 3.0",
            None if a is None else a >= 3.0,
            f"{served:.1f} / {off_hi['infer_per_s']:.1f} infer/s",
        ),
        Ratio(
            "b",
            f"served with batching (c={hi}) / in-process ceiling at the mean executed batch size",
            b, ">= 0.80", None if b is None else b >= 0.8, b_detail,
        ),
        Ratio(
            "c", f"p99 at c={lo}: batching on minus off (ms)", c,
            f"<= max_queue_delay + 2 ms = {budget:.1f} ms", None if math.isnan(c) else c <= budget,
            f"p99 {p99_on:.2f} ms on vs {p99_off:.2f} ms off (p50: {p50:+.2f} ms)",
        ),
    ]  # fmt: skip


def cpu_budget(rows: Sequence[Row], ceiling: Points, cores: int | None) -> list[str]:
    """Why ratio (b) is what it is. The model needs ``threads / K`` CPU per sample (K the
    ceiling's rate); what server and client spent beyond that per request is serving, o.
    Sharing ``cores``, served / ceiling <= cores / (threads + K * o)."""
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


LOAD_COLUMNS = (
    "model c req/s infer/s p50_ms p90_ms p99_ms errors mean_exec_batch exec_ms "
    "client_CPU_cores server_CPU_cores others'_CPU_cores server_CPU_ms/req counted"
)


def _load_table(rows: Sequence[Row]) -> list[str]:
    cells = []
    for r in rows:
        lat, server, rate = r["latency_ms"], r["server_cpu_cores"], r["req_per_s"]
        per_req = server * 1e3 / rate if server is not None and rate > 0 else None
        cells.append(
            [
                *(r["spec"]["model"], r["spec"]["concurrency"], f"{rate:.1f}"),
                *(f"{r['infer_per_s']:.1f}", *(fmt(lat[p]) for p in ("p50", "p90", "p99"))),
                *(r["errors"], fmt(r["mean_exec_batch"]), fmt(r.get("mean_exec_ms"), 3)),
                *(fmt(r["client_cpu_cores"]), fmt(server), fmt(r["other_cpu_cores"])),
                *(fmt(per_req, 3), f"{r['requests']}{' (capped)' if r['capped'] else ''}"),
            ]
        )
    columns = [c.replace("_", " ") for c in LOAD_COLUMNS.split()]
    return table(columns, cells, "lr" + "r" * 13)


def markdown(raw: dict[str, Any], ratios: Sequence[Ratio]) -> str:
    """The whole report.md text from the raw results (results.json)."""
    rows, ceiling, settings, machine = raw["rows"], raw["ceiling"], raw["settings"], raw["machine"]
    mlp = [r for r in rows if r["spec"]["model"] in MLP_MODELS]
    out = ["# Load test: dynamic batching", "", f"Run: {settings['mode']}.", ""]
    out += [f"Command (from the repository root): `{raw['command']}`", "", "## Target ratios", ""]
    cells = [
        [f"({r.key})", r.title, fmt(r.value), r.target, "n/a" if r.met is None else
         ("yes" if r.met else "**no**"), r.detail]
        for r in ratios
    ]  # fmt: skip
    out += table(["", "ratio", "value", "target", "met", "detail"], cells, "llr")
    budget = cpu_budget(rows, ceiling, machine.get("nproc"))
    if budget:
        out += ["", "### Where the CPU goes (ratio b)", "", *budget]
    out += ["", f"## MLP {settings.get('MLP', '3 x 1024 FP32')}, batch 1 per request: "]
    out[-1] += "batching off vs on"
    out += [
        "",
        *_load_table(sorted(mlp, key=lambda r: (r["spec"]["concurrency"], r["spec"]["model"]))),
    ]
    out += ["", "## add_sub (per-request overhead, [1, 16] FP32 x 2)", ""]
    out += _load_table([r for r in rows if r not in mlp])
    out += ["", f"## In-process onnxruntime ceiling ({ceiling[0]['threads']} intra-op threads)", ""]
    out += table(
        ["batch", "samples/s", "ms/run", "runs"],
        [[p["batch_size"], f"{p['samples_per_s']:.1f}", f"{p['ms_per_run']:.3f}", p["runs"]]
         for p in ceiling],
        "rrrr",
    )  # fmt: skip
    if raw.get("plotted", True):
        out += ["", f"![throughput and p99 vs concurrency]({PLOT_NAME})"]
    out += ["", "## Settings", ""]
    out += [f"- {k}: {v}" for k, v in settings.items()]
    out += [f"- server exit code after SIGTERM: {raw['server_exit']}", "", "## Machine", ""]
    out += [f"- {k}: {v}" for k, v in machine.items()]
    out += ["", "## Reading the numbers", ""]
    out += [
        "- loadtest/README.md, 'What the numbers mean', says what each column is. exec ms: "
        "the model's compute per execution in the server, against the ceiling's ms/run at "
        "that batch; the ceiling runs with the intra-op threads the server gives a "
        "one-instance model (all cores) on an otherwise idle machine.",
        *(f"- {n}" for n in raw["notes"]),
    ]
    return "\n".join(out) + "\n"


def _ceiling_lines(ax: Any, rows: Sequence[Row], ceiling: Points) -> None:
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


def write_report(raw: dict[str, Any], out_dir: Path) -> None:
    """report.md and the plot from the raw results this scenario keeps in results.json."""
    rows, ceiling = raw["rows"], raw["ceiling"]
    series = {
        label: [
            (r["spec"]["concurrency"], r["infer_per_s"], r["latency_ms"]["p99"])
            for r in rows
            if r["spec"]["model"] == model
        ]
        for model, label in ((BATCH_OFF, "batching off"), (BATCH_ON, "batching on"))
    }
    plotted = plot(
        series, out_dir / PLOT_NAME, raw["title"], lambda ax: _ceiling_lines(ax, rows, ceiling)
    )
    text = markdown({**raw, "plotted": plotted}, compute_ratios(rows, ceiling, raw["delay_us"]))
    (out_dir / "report.md").write_text(text, encoding="utf-8")


def _parameter(item: str) -> tuple[str, str]:
    key, sep, value = item.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"wants KEY=VALUE, got {item!r}")
    return key, value


def _notes(rows: list[Row], server_exit: int) -> list[str]:
    notes = []
    on = [r["mean_exec_batch"] for r in rows if r["spec"]["model"] == BATCH_ON]
    if on and all(b is not None and b < 1.05 for b in on):
        notes.append(
            "mlp_batch executed batches of ~1 at every concurrency: the server's dynamic "
            "batcher is not active yet, so 'batching on' equals 'off' and ratio (a) is ~1."
        )
    notes.append("client and server share this machine's cores; CPU columns show the split.")
    noisy = [r for r in rows if (r["other_cpu_cores"] or 0.0) > 0.2]
    if noisy:
        worst = max(noisy, key=lambda r: r["other_cpu_cores"])
        notes.append(
            f"other processes on the machine used more than 0.2 cores during {len(noisy)} of "
            f"{len(rows)} scenarios (up to {worst['other_cpu_cores']:.2f} cores at "
            f"{worst['spec']['model']} c={worst['spec']['concurrency']}): those rows are noisy."
        )
    if server_exit != 0:
        notes.append(f"the server exited with code {server_exit} after SIGTERM (expected 0).")
    return notes


@register
class Batching(Scenario):
    """Dynamic batching off vs on, add_sub, the in-process ceiling: report.md + plot."""

    name = "batching"

    @staticmethod
    def add_cli_args(p: argparse.ArgumentParser) -> None:
        window_args(
            p, None, concurrency=[1, 8, 32, 64], processes=1, quick="short smoke run (< 90 s)"
        )
        p.add_argument("--delay-us", type=int, default=500, help="max_queue_delay_microseconds")
        p.add_argument("--width", type=int, default=WIDTH, help="MLP width (4096: compute-bound)")
        p.add_argument("--layers", type=int, default=LAYERS, help="MLP layers (more compute)")
        p.add_argument(
            "--mlp-parameter", type=_parameter, action="append", default=[], metavar="KEY=VALUE",
            help="a config parameter for both MLP models (repeatable), e.g. allow_spinning=true",
        )  # fmt: skip
        p.add_argument("--max-requests", type=int, help="hard cap on requests per scenario")
        p.add_argument("--out-dir", type=Path, help="default loadtest/results (quick: .../quick)")
        p.add_argument("--write-repo", type=Path, help="only write the model repository (ghz)")
        p.add_argument("--render", type=Path, help="only rebuild report.md and the plot from it")

    @staticmethod
    def run(args: argparse.Namespace) -> int:
        params = dict(args.mlp_parameter)
        if args.render:
            write_report(json.loads(args.render.read_text(encoding="utf-8")), args.render.parent)
            return 0
        if args.write_repo:
            build_repository(args.write_repo, args.delay_us, params, args.width, args.layers)
            print(f"wrote the model repository to {args.write_repo}", file=sys.stderr)
            return 0
        quick = {"duration": 2.0, "warmup": 0.5, "max_requests": 20_000}
        full = {"duration": 20.0, "warmup": 3.0, "max_requests": 200_000}
        for key, value in (quick if args.quick else full).items():
            if getattr(args, key) is None:
                setattr(args, key, value)
        ceiling_s = 1.0 if args.quick else 4.0
        out_dir = args.out_dir or (RESULTS / "quick" if args.quick else RESULTS)
        started, machine = time.monotonic(), machine_info()
        with tempfile.TemporaryDirectory(prefix="loadtest-repo-") as tmp:
            onnx_file = build_repository(Path(tmp), args.delay_us, params, args.width, args.layers)
            server = ServerProcess([Path(tmp)]).start(timeout=120)
            print(f"server pid {server.pid} at {server.url}", file=sys.stderr)
            try:
                asyncio.run(check_outputs(server.url, args.width, args.layers))
                base = LoadSpec(
                    server.url, "", duration=args.duration, warmup=args.warmup,
                    processes=args.processes, max_requests=args.max_requests,
                    server_pid=server.pid,
                )  # fmt: skip
                rows = asyncio.run(run_scenarios(base, sorted(args.concurrency)))
            finally:
                server_exit = server.stop(timeout=60)
            print(f"server exited with {server_exit}", file=sys.stderr)
            observed = {r["mean_exec_batch"] for r in rows if r["spec"]["model"] in MLP_MODELS}
            sizes = [1, 8, 32, 64]
            if None not in observed:
                sizes = sorted({ceiling_size(b) for b in observed} | {1, MAX_BATCH})
            spinning = params.get("allow_spinning") == "true"
            points = measure_ceiling(onnx_file, sizes, duration=ceiling_s, spinning=spinning)
        machine["load average at end (1/5/15 min)"] = loadavg()
        settings = {
            "mode": "quick (smoke, numbers not meaningful)" if args.quick else "full",
            "dynamic_batching max_queue_delay_microseconds": args.delay_us,
            "max_batch_size": MAX_BATCH,
            "MLP": f"{args.layers} x {args.width} FP32",
            "MLP config parameters": ", ".join(f"{k}={v}" for k, v in params.items()) or "none",
            "warm-up s / measured s per scenario": f"{args.warmup} / {args.duration}",
            "client processes per scenario": args.processes,
            "max requests per scenario": args.max_requests,
            "ceiling seconds per batch size": ceiling_s,
            "wall time of the whole run s": f"{time.monotonic() - started:.0f}",
        }
        raw = {
            "settings": settings,
            "machine": machine,
            "command": args.command,
            "delay_us": args.delay_us,
            "title": f"MLP {args.layers}x{args.width} FP32, max_queue_delay {args.delay_us} us, "
            f"{machine['nproc']} cores",
            "notes": _notes(rows, server_exit),
            "server_exit": server_exit,
            "rows": rows,
            "ceiling": [p.to_dict() for p in points],
        }
        write_json(raw, out_dir / "results.json")
        write_report(raw, out_dir)
        print(f"wrote {out_dir / 'report.md'}", file=sys.stderr)
        if server_exit != 0:
            print(f"server exit {server_exit}; log tail:\n{server.log[-3000:]}", file=sys.stderr)
        errors = sum(r["errors"] for r in rows)
        return 0 if server_exit == 0 and errors == 0 else 1
