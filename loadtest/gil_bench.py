"""How long an instance thread's ``session.run`` takes while the loop thread is busy.

onnxruntime releases the GIL while it computes and takes it back before ``run`` returns.
If the event loop's thread is then in a stretch of Python work (decoding a frame of
requests, encoding responses), the instance thread waits until that stretch ends or
until CPython's switch interval (5 ms by default) forces a hand-over. This measures that
wait without any server: one thread runs the MLP back to back (one intra-op thread, so
the two threads never compete for a core on a 2-core machine), while the main thread
plays the loop: Python work in bursts of ``--burst-us``, then ``--idle-us`` asleep
(epoll), with the switch interval set to each value of ``--switch-us``.

    .venv/bin/python loadtest/gil_bench.py              # ~20 s; writes results/gil_bench.md
    .venv/bin/python loadtest/gil_bench.py --quick      # prints only
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort
from loadresult import publish_report

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT / "tests"))
from models import mlp_model  # noqa: E402


def _session(width: int) -> tuple[ort.InferenceSession, str]:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    model = mlp_model(width=width, layers=3, seed=0)
    session = ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    return session, session.get_inputs()[0].name


def _run_times(
    session: ort.InferenceSession, feed: dict[str, np.ndarray], runs: int
) -> list[float]:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        session.run(None, feed)
        times.append(1000 * (time.perf_counter() - start))
    return times


class _Loop(threading.Thread):
    """Python work in bursts (the GIL held), then a sleep (the GIL released)."""

    def __init__(self, burst_us: int, idle_us: int) -> None:
        super().__init__(daemon=True)
        self.burst, self.idle = burst_us / 1e6, idle_us / 1e6
        self.stopping = False

    def run(self) -> None:
        while not self.stopping:
            end = time.perf_counter() + self.burst
            while time.perf_counter() < end:
                pass
            time.sleep(self.idle)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--width", type=int, default=1024)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--runs", type=int, default=300)
    p.add_argument("--burst-us", type=int, nargs="+", default=[1000, 3000])
    p.add_argument("--idle-us", type=int, default=1000)
    p.add_argument("--switch-us", type=int, nargs="+", default=[5000, 1000, 200])
    p.add_argument("--quick", action="store_true", help="fewer runs; print only")
    p.add_argument("--out", type=Path, default=REPO_ROOT / "loadtest" / "results" / "gil_bench.md")
    args = p.parse_args(argv)
    runs = 60 if args.quick else args.runs
    session, name = _session(args.width)
    feed = {name: np.ones((args.batch, args.width), np.float32)}
    _run_times(session, feed, 20)  # warm-up
    alone = _run_times(session, feed, runs)
    lines = [
        f"# session.run beside a busy loop thread (MLP 3 x {args.width}, batch {args.batch}, "
        "one intra-op thread)",
        "",
        f"Command: `.venv/bin/python loadtest/gil_bench.py{' --quick' if args.quick else ''}`",
        "",
        "| switch interval µs | loop bursts µs / idle µs | median ms | mean ms | mean / alone |",
        "|--:|--:|--:|--:|--:|",
        f"| - | no loop thread | {statistics.median(alone):.3f} | {statistics.mean(alone):.3f} "
        "| 1.00 |",
    ]
    default_switch = sys.getswitchinterval()
    try:
        for switch in args.switch_us:
            sys.setswitchinterval(switch / 1e6)
            for burst in args.burst_us:
                loop = _Loop(burst, args.idle_us)
                loop.start()
                time.sleep(0.05)
                times = _run_times(session, feed, runs)
                loop.stopping = True
                loop.join()
                mean = statistics.mean(times)
                lines.append(
                    f"| {switch} | {burst} / {args.idle_us} | {statistics.median(times):.3f} "
                    f"| {mean:.3f} | {mean / statistics.mean(alone):.2f} |"
                )
    finally:
        sys.setswitchinterval(default_switch)
    publish_report("\n".join(lines) + "\n", None if args.quick else args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
