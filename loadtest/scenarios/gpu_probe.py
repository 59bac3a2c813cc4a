"""What one GPU execution costs in the server's ONNX Runtime backend, without the server around it.

Isolates the two things gpu-bench's served figures mix with the server's own costs:

- the CNN: the time of the first execution of each new batch size (where cuDNN's convolution
  algorithm search runs) against a repeat of the same size, per ``cudnn_conv_algo_search``;
- the MLP 3 x ``--width`` at ``--batch``: ``instance.execute`` (pinned staging, IO binding, the
  output copied back) against plain ``session.run`` on the same session options, one thread.

    python -m loadtest gpu-probe            # about 30 s on one GPU; prints FIGURE lines
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from loadtest.scenario import Scenario, register
from loadtest.scenarios.gpu_bench import CONV_ALGO_SEARCH, build_repository, no_gpu_reason
from service.backends.base import InstanceSpec
from service.backends.onnxruntime import OnnxRuntimeBackend
from service.backends.onnxruntime.backend import OnnxRuntimeInstance
from service.repository.config_file import read_config
from service.repository.layout import discover_models


def _timed(call: Callable[[], object], repeats: int) -> float:
    """Median milliseconds of ``repeats`` calls."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def _open(root: Path, model: str) -> OnnxRuntimeInstance:
    config = read_config(discover_models([root])[model])
    return OnnxRuntimeBackend().open(
        config, root / model / "1", InstanceSpec(f"{model}_0_0", "KIND_GPU", 0, 4)
    )


def probe_cnn(args: argparse.Namespace, search: str, sizes: list[int]) -> str:
    with tempfile.TemporaryDirectory(prefix="gpu-probe-") as tmp:
        build_repository(
            Path(tmp), argparse.Namespace(**{**vars(args), "conv_algo_search": search})
        )
        instance = _open(Path(tmp), "cnn")
        rng = np.random.default_rng(0)
        first, again = [], []
        try:
            for size in sizes:
                x = {"INPUT0": rng.random((size, 3, 64, 64), dtype=np.float32)}
                first.append(_timed(lambda x=x: instance.execute(x, ["OUTPUT0"]), 1))
                again.append(_timed(lambda x=x: instance.execute(x, ["OUTPUT0"]), 5))
        finally:
            instance.close()
    return (
        f"cnn, cudnn_conv_algo_search {search}: first run of a new batch size "
        f"{statistics.median(first):.1f} ms median (max {max(first):.1f}), "
        f"repeat {statistics.median(again):.2f} ms, over sizes {sizes[0]}..{sizes[-1]}"
    )


def probe_mlp(args: argparse.Namespace) -> str:
    with tempfile.TemporaryDirectory(prefix="gpu-probe-") as tmp:
        build_repository(Path(tmp), args)
        instance = _open(Path(tmp), "mlp")
        session = instance._session  # the very session the instance runs
        x = np.random.default_rng(0).random((args.batch, args.width), dtype=np.float32)
        try:
            served = _timed(lambda: instance.execute({"INPUT0": x}, ["OUTPUT0"]), 200)
            plain = _timed(lambda: session.run(["OUTPUT0"], {"INPUT0": x}), 200)
        finally:
            instance.close()
    return (
        f"mlp 3x{args.width} batch {args.batch}: instance.execute {served:.3f} ms, "
        f"session.run {plain:.3f} ms (median of 200, one thread)"
    )


@register
class GpuProbe(Scenario):
    """GPU: one execution in the ONNX Runtime backend without the server; cuDNN's search."""

    name = "gpu-probe"

    @staticmethod
    def add_cli_args(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--width", type=int, default=4096)
        parser.add_argument("--batch", type=int, default=12)
        parser.add_argument("--sizes", type=int, default=8, help="CNN batch sizes 1..N")

    @staticmethod
    def run(args: argparse.Namespace) -> int:
        reason = no_gpu_reason()
        if reason is not None:
            print(f"gpu-probe: no usable GPU here: {reason}", file=sys.stderr)
            return 2
        bench = {"delay_us": 500, "cuda_graphs": False, "device": "gpu", "instances": 1}
        args = argparse.Namespace(**vars(args), **bench, conv_algo_search="exhaustive")
        sizes = list(range(1, args.sizes + 1))
        for search in sorted(CONV_ALGO_SEARCH):
            print("FIGURE:", probe_cnn(args, search, sizes), flush=True)
        print("FIGURE:", probe_mlp(args), flush=True)
        return 0
