"""The closed-loop gRPC load generator alone, against any KServe v2 gRPC server.

Inputs are synthesized from ModelMetadata: the first -1 dimension becomes ``--batch``, other
-1 dimensions ``--dynamic-dim``; numeric datatypes only. Prints one line; exits 1 when a
request failed, 2 when the setup fails (unknown model, server down).

    .venv/bin/python -m loadtest loadgen --url 127.0.0.1:8001 --model add_sub --concurrency 8
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from dataclasses import fields
from pathlib import Path

import grpc

from loadtest.loadgen import LoadSpec, run_load
from loadtest.report import write_json
from loadtest.scenario import Scenario, register, window_args


@register
class Loadgen(Scenario):
    """Closed-loop ModelInfer load against a running server (prints one line)."""

    name = "loadgen"

    @staticmethod
    def add_cli_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("--url", default="127.0.0.1:8001", help="host:port of the gRPC server")
        p.add_argument("--model", required=True)
        window_args(p, 10.0, 2.0, concurrency=8, processes=1)
        p.add_argument("--max-requests", type=int, default=100_000, help="cap on requests sent")
        p.add_argument("--timeout", type=float, default=30.0, help="per-request deadline, s")
        p.add_argument("--batch", type=int, default=1, help="size of the leading -1 dimension")
        p.add_argument("--dynamic-dim", type=int, default=16, help="size of other -1 dimensions")
        p.add_argument("--server-pid", type=int, help="server PID, to report its CPU use")
        p.add_argument("--json", type=Path, help="also write the result as JSON here")

    @staticmethod
    def run(args: argparse.Namespace) -> int:
        spec = LoadSpec(**{f.name: getattr(args, f.name) for f in fields(LoadSpec)})
        try:
            result = asyncio.run(run_load(spec))
        except grpc.aio.AioRpcError as exc:
            print(f"loadgen: {exc.code().name}: {exc.details()}", file=sys.stderr)
            return 2
        print(result.summary())
        if result.first_error:
            print(f"first error: {result.first_error}", file=sys.stderr)
        if args.json:
            write_json(result.to_dict(), args.json)
        return 1 if result.errors else 0
