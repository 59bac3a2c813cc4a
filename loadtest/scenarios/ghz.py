"""Write ghz config files for the batching scenarios, with loadgen.py's exact payloads.

ghz cannot be installed on the development machine (no binary through the reachable
registries), so these files let the same scenarios be cross-checked with an independent Go
client elsewhere. The tensors come from payloads.synthesize with loadgen's defaults (batch 1,
variable dims 16, seed 0), so both tools send byte-identical ``raw_input_contents``.

    .venv/bin/python -m loadtest ghz-configs [--host 127.0.0.1:8001] [--duration 20s]
"""

from __future__ import annotations

import argparse
import base64
import json
from pathlib import Path
from typing import Any

from loadtest import REPO_ROOT
from loadtest.payloads import InputSpec, synthesize
from loadtest.scenario import Scenario, register

#: Served signatures (as ModelMetadata reports them) of the batching scenario's models.
SIGNATURES: dict[str, list[InputSpec]] = {
    "mlp_nobatch": [InputSpec("INPUT0", "FP32", (-1, 1024))],
    "mlp_batch": [InputSpec("INPUT0", "FP32", (-1, 1024))],
    "add_sub": [InputSpec("INPUT0", "FP32", (-1, -1)), InputSpec("INPUT1", "FP32", (-1, -1))],
}
SCENARIOS: list[tuple[str, int]] = [
    *((m, c) for m in ("mlp_nobatch", "mlp_batch") for c in (1, 8, 32, 64)),
    ("add_sub", 1),
    ("add_sub", 8),
]


def call_data(model: str) -> dict[str, Any]:
    """ModelInferRequest as protojson: bytes fields are base64, int64 shapes plain numbers."""
    tensors = synthesize(SIGNATURES[model])
    return {
        "model_name": model,
        "inputs": [
            {"name": t.name, "datatype": t.datatype, "shape": list(t.shape)} for t in tensors
        ],
        "raw_input_contents": [base64.b64encode(t.data).decode("ascii") for t in tensors],
    }


def ghz_config(
    model: str, concurrency: int, *, host: str, duration: str, total: int, skip_first: int
) -> dict[str, Any]:
    """One ghz run: ``total`` requests at most, stopped after ``duration`` at the latest.

    ``total`` + ``max-duration`` bound the run in count and in time (with ``duration`` alone
    ghz ignores ``total``); ``skipFirst`` leaves the warm-up requests out of the statistics.
    Paths are relative to the repository root, where ghz must be started.
    """
    return {
        "name": f"{model} c={concurrency}",
        "proto": "protos/inference/grpc_service.proto",
        "import-paths": ["protos"],
        "call": "inference.GRPCInferenceService.ModelInfer",
        "host": host,
        "insecure": True,
        "concurrency": concurrency,
        "connections": 1,
        "total": total,
        "max-duration": duration,
        "skipFirst": skip_first,
        "timeout": "30s",
        "data": call_data(model),
    }


@register
class GhzConfigs(Scenario):
    """Write loadtest/ghz/*.json: the batching scenarios for ghz, same payloads."""

    name = "ghz-configs"

    @staticmethod
    def add_cli_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("--host", default="127.0.0.1:8001", help="server host:port")
        p.add_argument("--duration", default="20s", help="ghz max-duration per run")
        p.add_argument("--total", type=int, default=100_000, help="request cap per run")
        p.add_argument("--skip-first", type=int, default=200, help="warm-up requests not counted")
        p.add_argument("--out-dir", type=Path, default=REPO_ROOT / "loadtest" / "ghz")

    @staticmethod
    def run(args: argparse.Namespace) -> int:
        args.out_dir.mkdir(parents=True, exist_ok=True)
        for model, c in SCENARIOS:
            config = ghz_config(
                model, c, host=args.host, duration=args.duration, total=args.total,
                skip_first=args.skip_first,
            )  # fmt: skip
            path = args.out_dir / f"{model}_c{c}.json"
            path.write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
            print(path)
        return 0
