"""Write ghz config files for the batching scenarios, with the load generator's payloads.

ghz cannot be installed on the development machines, so these files let the same
scenarios be cross-checked with an independent Go client elsewhere: the tensors come from
the load generator's synthesis (batch 1, variable dims 16, seed 0), byte for byte.

    .venv/bin/python -m loadtest ghz-configs [--host 127.0.0.1:8001] [--duration 20s]
"""

from __future__ import annotations

import argparse
import base64
import json
from pathlib import Path
from typing import Any

from loadtest import REPO_ROOT
from loadtest.loadgen import DATATYPE, InputSpec, synthesize
from loadtest.scenario import Scenario, register

#: Served signatures (as ModelMetadata reports them) of the batching scenario's models.
MLP = [InputSpec("INPUT0", "FP32", (-1, 1024))]
ADD_SUB = [InputSpec("INPUT0", "FP32", (-1, -1)), InputSpec("INPUT1", "FP32", (-1, -1))]
SIGNATURES = {"mlp_nobatch": MLP, "mlp_batch": MLP, "add_sub": ADD_SUB}
CASES = [(m, c) for m in ("mlp_nobatch", "mlp_batch") for c in (1, 8, 32, 64)]
CASES += [("add_sub", 1), ("add_sub", 8)]


def ghz_config(model: str, concurrency: int, args: argparse.Namespace) -> dict[str, Any]:
    """One ghz run. ``total`` and ``max-duration`` bound it in count and in time (with
    ``duration`` alone ghz ignores ``total``); ``skipFirst`` leaves the warm-up out of the
    statistics; paths are relative to the repository root, where ghz must start. The data
    is the request as protojson: bytes in base64, shapes as plain numbers."""
    tensors = synthesize(SIGNATURES[model])
    inputs = [
        {"name": name, "datatype": DATATYPE[a.dtype], "shape": list(a.shape)}
        for name, a in tensors.items()
    ]
    return {
        "name": f"{model} c={concurrency}",
        "proto": "protos/inference/grpc_service.proto",
        "import-paths": ["protos"],
        "call": "inference.GRPCInferenceService.ModelInfer",
        "host": args.host,
        "insecure": True,
        "concurrency": concurrency,
        "connections": 1,
        "total": args.total,
        "max-duration": args.duration,
        "skipFirst": args.skip_first,
        "timeout": "30s",
        "data": {
            "model_name": model,
            "inputs": inputs,
            "raw_input_contents": [
                base64.b64encode(a.tobytes()).decode() for a in tensors.values()
            ],
        },
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
        for model, c in CASES:
            path = args.out_dir / f"{model}_c{c}.json"
            path.write_text(json.dumps(ghz_config(model, c, args), indent=2) + "\n", "utf-8")
            print(path)
        return 0
