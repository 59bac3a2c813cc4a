"""Server settings: one frozen object built from the command line (flags named as Triton's)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["DEFAULT_MAX_MESSAGE_BYTES", "ServerConfig", "parse_args"]

# Triton's default: the largest message gRPC can carry (2 GiB - 1).
DEFAULT_MAX_MESSAGE_BYTES = 2**31 - 1


@dataclass(frozen=True)
class ServerConfig:
    model_repositories: tuple[Path, ...]
    grpc_address: str = "0.0.0.0"
    grpc_port: int = 8001
    grpc_max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    grpc_reuse_port: bool = False
    strict_readiness: bool = True
    exit_timeout_secs: float = 30.0
    log_verbose: int = 0
    model_control_mode: str = "none"
    load_models: tuple[str, ...] = ()
    repository_poll_secs: float = 15.0
    cache_size_bytes: int = 0  # 0: no response cache


def _bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got '{text}'")


def _message_size(text: str) -> int:
    value = int(text)
    if not 0 < value <= DEFAULT_MAX_MESSAGE_BYTES:
        raise argparse.ArgumentTypeError(f"must be in 1..{DEFAULT_MAX_MESSAGE_BYTES}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m service",
        description="Triton / KServe v2 compatible inference server (gRPC).",
    )
    parser.add_argument(
        "--model-repository",
        "--model-store",
        action="append",
        required=True,
        type=Path,
        dest="model_repositories",
        help="model repository folder (repeatable)",
    )
    parser.add_argument("--grpc-address", default="0.0.0.0", help="address to bind")
    parser.add_argument("--grpc-port", type=int, default=8001, help="0 picks a free port")
    parser.add_argument(
        "--grpc-max-message-size",
        type=_message_size,
        default=DEFAULT_MAX_MESSAGE_BYTES,
        dest="grpc_max_message_bytes",
        help="largest gRPC message sent or received, in bytes",
    )
    parser.add_argument(
        "--reuse-grpc-port",
        type=_bool,
        nargs="?",
        const=True,
        default=False,
        dest="grpc_reuse_port",
        help="allow several servers on one port (SO_REUSEPORT)",
    )
    parser.add_argument(
        "--strict-readiness",
        type=_bool,
        nargs="?",
        const=True,
        default=True,
        help="ready only when every model is ready (default true)",
    )
    parser.add_argument(
        "--exit-timeout-secs",
        type=float,
        default=30.0,
        help="on SIGTERM/SIGINT, how long in-flight requests may take to finish",
    )
    parser.add_argument("--log-verbose", type=int, default=0, help="verbose logging level")
    parser.add_argument(
        "--model-control-mode",
        choices=("none", "explicit", "poll"),
        default="none",
        help="none: load all at start; explicit: load/unload through the API; poll: follow "
        "repository changes",
    )
    parser.add_argument(
        "--load-model",
        action="append",
        default=[],
        dest="load_models",
        help="with --model-control-mode=explicit: load this model at start (repeatable; '*' all)",
    )
    parser.add_argument(
        "--repository-poll-secs",
        type=float,
        default=15.0,
        help="with --model-control-mode=poll: seconds between repository scans",
    )
    parser.add_argument(
        "--cache-config",
        action="append",
        default=[],
        dest="cache_config",
        help="response cache, e.g. 'local,size=1048576' (bytes)",
    )
    return parser


def _cache_size(specs: Sequence[str]) -> int:
    """``local,size=N`` (Triton's syntax) -> N bytes; other cache kinds are refused."""
    size = 0
    for spec in specs:
        kind, _, setting = spec.partition(",")
        key, _, value = setting.partition("=")
        if kind != "local" or key != "size" or not value.isdigit():
            raise argparse.ArgumentTypeError(
                f"--cache-config '{spec}': expected 'local,size=<bytes>'"
            )
        size = int(value)
    return size


def parse_args(argv: Sequence[str] | None = None) -> ServerConfig:
    parser = build_parser()
    args = parser.parse_args(argv)
    for repo in args.model_repositories:
        if not repo.is_dir():
            parser.error(f"model repository '{repo}' is not a directory")
    if args.load_models and args.model_control_mode != "explicit":
        parser.error("--load-model needs --model-control-mode=explicit")
    if args.repository_poll_secs <= 0:
        parser.error("--repository-poll-secs must be positive")
    try:
        cache_size = _cache_size(args.cache_config)
    except argparse.ArgumentTypeError as exc:
        parser.error(str(exc))
    return ServerConfig(
        model_repositories=tuple(args.model_repositories),
        grpc_address=args.grpc_address,
        grpc_port=args.grpc_port,
        grpc_max_message_bytes=args.grpc_max_message_bytes,
        grpc_reuse_port=args.grpc_reuse_port,
        strict_readiness=args.strict_readiness,
        exit_timeout_secs=args.exit_timeout_secs,
        log_verbose=args.log_verbose,
        model_control_mode=args.model_control_mode,
        load_models=tuple(args.load_models),
        repository_poll_secs=args.repository_poll_secs,
        cache_size_bytes=cache_size,
    )
