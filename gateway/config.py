"""``python -m gateway`` flags -> GatewayConfig (frozen); nothing happens at import."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["DEFAULT_MAX_BODY_BYTES", "GatewayConfig", "parse_args"]

#: Largest request body read (and largest inflated body); 1 GiB keeps one request from
#: exhausting memory while leaving room for large binary tensors.
DEFAULT_MAX_BODY_BYTES = 1 << 30


@dataclass(frozen=True, slots=True)
class GatewayConfig:
    grpc_target: str = "127.0.0.1:8001"
    http_address: str = "0.0.0.0"
    http_port: int = 8000
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    log_verbose: int = 0


_DEFAULTS = GatewayConfig()


def _positive(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def parse_args(argv: Sequence[str] | None = None) -> GatewayConfig:
    parser = argparse.ArgumentParser(
        prog="python -m gateway",
        description="REST gateway: serves the KServe v2 HTTP/REST API by calling the "
        "inference service over gRPC.",
    )
    parser.add_argument(
        "--grpc-target",
        default=_DEFAULTS.grpc_target,
        help="HOST:PORT of the gRPC inference service (default %(default)s)",
    )
    parser.add_argument("--http-address", default=_DEFAULTS.http_address, help="address to bind")
    parser.add_argument(
        "--http-port",
        type=int,
        default=_DEFAULTS.http_port,
        help="HTTP port (default %(default)s, as Triton; 0 picks a free port)",
    )
    parser.add_argument(
        "--http-max-body-bytes",
        type=_positive,
        default=DEFAULT_MAX_BODY_BYTES,
        help="largest request body accepted, after decompression (default %(default)s)",
    )
    parser.add_argument("--log-verbose", type=int, default=0, help="verbose logging level")
    opts = parser.parse_args(argv)
    return GatewayConfig(
        grpc_target=opts.grpc_target,
        http_address=opts.http_address,
        http_port=opts.http_port,
        max_body_bytes=opts.http_max_body_bytes,
        log_verbose=opts.log_verbose,
    )
