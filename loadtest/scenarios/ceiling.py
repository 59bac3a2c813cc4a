"""The in-process onnxruntime ceiling alone: back-to-back ``session.run`` per batch size,
with the server's settings for a one-instance CPU model. The benchmark MLP (3 x 1024 FP32)
by default, or ``--model FILE.onnx`` with float inputs.

    .venv/bin/python -m loadtest ceiling --batch-sizes 1 8 32 64 --duration 3
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from models import mlp_model

from loadtest.ceiling import measure_ceiling
from loadtest.report import write_json
from loadtest.scenario import Scenario, register, window_args


@register
class Ceiling(Scenario):
    """In-process onnxruntime samples/s at given batch sizes (the ceiling)."""

    name = "ceiling"

    @staticmethod
    def add_cli_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("--model", type=Path, help="ONNX file (default: the benchmark MLP)")
        p.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 8, 32, 64])
        window_args(p, 3.0, rounds=3)
        p.add_argument("--threads", type=int, help="intra-op threads (default: cores)")
        p.add_argument("--json", type=Path, help="also write the points as JSON here")

    @staticmethod
    def run(args: argparse.Namespace) -> int:
        with tempfile.TemporaryDirectory() as tmp:
            model = args.model or Path(tmp) / "mlp.onnx"
            if args.model is None:
                model.write_bytes(mlp_model(width=1024, layers=3, seed=0).SerializeToString())
            points = measure_ceiling(
                model, args.batch_sizes, duration=args.duration, rounds=args.rounds,
                threads=args.threads,
            )  # fmt: skip
        for pt in points:
            print(
                f"batch {pt.batch_size:4d}: {pt.samples_per_s:10.1f} samples/s "
                f"({pt.ms_per_run:.3f} ms/run, {pt.runs} runs, {pt.threads} threads)"
            )
        if args.json:
            write_json([pt.to_dict() for pt in points], args.json)
        return 0
