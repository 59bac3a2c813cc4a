"""The report writer: every report under ``results/`` starts with the command that
reproduces it (``command``, from the real argument list); tables, the machine, the JSON
beside a report and the throughput / p99 plot are written alike by every scenario."""

from __future__ import annotations

import importlib.metadata
import json
import math
import os
import platform
import shlex
import statistics
import subprocess
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from loadtest import REPO_ROOT


def command(argv: Sequence[str]) -> str:
    """``python -m loadtest SCENARIO ...`` as run from the repository root; an interpreter
    outside the checkout is shown as ``python`` (no machine's paths in a report)."""
    exe = Path(sys.executable)
    shown = str(exe.relative_to(REPO_ROOT)) if exe.is_relative_to(REPO_ROOT) else "python"
    return shlex.join([shown, "-m", "loadtest", *argv])


def publish(text: str, out: Path | None) -> None:
    """Print a report, and keep it in ``out`` unless that is None (smoke runs only print)."""
    print(text)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text, encoding="utf-8")
        print(f"wrote {out}", file=sys.stderr)


def write_json(raw: Mapping[str, Any] | Sequence[Any], path: Path) -> None:
    """The raw numbers beside a report, so that the report can be rebuilt from them."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(raw, indent=2) + "\n", encoding="utf-8")


def table(columns: Sequence[str], rows: Iterable[Sequence[object]], align: str = "") -> list[str]:
    """A markdown table; ``align`` has one letter per column, ``r`` right, ``c`` centred."""
    rules = {"r": "--:|", "c": ":-:|"}
    rule = "".join(rules.get(a, "---|") for a in align[: len(columns)].ljust(len(columns), "l"))
    lines = ["| " + " | ".join(columns) + " |", "|" + rule]
    return lines + ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]


def median(values: Iterable[float]) -> float:
    """The median, NaN for no values (a table cell says nan rather than the run failing)."""
    values = list(values)
    return statistics.median(values) if values else float("nan")


def fmt(x: float | None, digits: int = 2) -> str:
    """A table cell: ``x`` to ``digits`` decimals, n/a when unknown (None or NaN)."""
    return "n/a" if x is None or math.isnan(x) else f"{x:.{digits}f}"


def loadavg() -> str:
    return " / ".join(f"{x:.2f}" for x in os.getloadavg())


def short_commit(ref: str = "HEAD") -> str:
    """The abbreviated commit of ``ref``; ``-dirty`` when HEAD has uncommitted changes."""
    done = subprocess.run(
        ["git", "rev-parse", "--short", ref], cwd=REPO_ROOT, capture_output=True, text=True
    )
    dirty = ref == "HEAD" and subprocess.run(["git", "diff", "--quiet", "HEAD"], cwd=REPO_ROOT)
    return done.stdout.strip() + ("-dirty" if dirty and dirty.returncode else "")


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def machine_info() -> dict[str, Any]:
    """What the numbers depend on: cores, CPU, library versions, commit, load."""
    cpuinfo = Path("/proc/cpuinfo")
    lines = cpuinfo.read_text().splitlines() if cpuinfo.exists() else []
    models = [ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("model name")]
    return {
        "nproc": os.cpu_count(),
        "usable cores (affinity)": len(os.sched_getaffinity(0)),
        "cpu": models[0] if models else platform.processor() or "unknown",
        "os": platform.platform(),
        "python": platform.python_version(),
        **{name: _version(name) for name in ("onnxruntime", "grpcio", "protobuf", "numpy")},
        "commit": short_commit() or "unknown",
        "load average at start (1/5/15 min)": loadavg(),
    }


Series = Mapping[str, Sequence[tuple[int, float, float]]]  # label -> (concurrency, rate, p99)


def plot(series: Series, path: Path, title: str, extra: Callable[[Any], None] | None) -> bool:
    """Throughput and p99 against concurrency, one line per series, log axes (Agg: no
    display needed); ``extra`` draws reference lines on the throughput axes. False when
    matplotlib (the bench extra) is missing: a smoke run still writes its tables."""
    try:
        import matplotlib
    except ImportError:
        print(f"matplotlib is not installed: no {path.name}", file=sys.stderr)
        return False
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator, ScalarFormatter

    fig, (ax_t, ax_p) = plt.subplots(1, 2, figsize=(11, 4.2))
    cs: list[int] = []
    for (label, points), style in zip(series.items(), ("o-", "s-", "^-", "v-"), strict=False):
        pts = sorted(points)
        cs = [p[0] for p in pts]
        ax_t.plot(cs, [p[1] for p in pts], style, label=label)
        ax_p.plot(cs, [p[2] for p in pts], style, label=label)
    if extra is not None:
        extra(ax_t)
    plain = FuncFormatter(lambda v, _: f"{v:g}")
    some = FuncFormatter(lambda v, _: f"{v:g}" if f"{v:g}"[0] in "25" else "")
    for ax, ylabel in ((ax_t, "inferences/s, log scale"), (ax_p, "p99 latency (ms), log scale")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.xaxis.set_major_locator(FixedLocator(cs))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.xaxis.set_major_formatter(ScalarFormatter())
        ax.yaxis.set_major_formatter(plain)  # plain numbers; minor ticks 2x and 5x labelled
        ax.yaxis.set_minor_formatter(some)
        ax.set_xlabel("concurrency (closed-loop clients)")
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True
