"""Server settings: one frozen object built from the command line (flags named as Triton's)."""

from __future__ import annotations

import argparse
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from wire.api_groups import Restriction, parse_restrictions
from wire.header_forward import pattern_flag

from . import SERVER_ID
from .flags import DEFAULT_MAX_MESSAGE_BYTES, build_parser, default_frontends
from .repository.limits import DEFAULT_MAX_INSTANCES
from .telemetry.metrics_config import LatencyMetrics, parse_metrics_config
from .telemetry.settings import LogSettings, TraceSettings, parse_trace_config

__all__ = [
    "DEFAULT_MAX_MESSAGE_BYTES",
    "MetricsConfig",
    "ServerConfig",
    "TlsConfig",
    "build_parser",
    "default_frontends",
    "parse_args",
]


@dataclass(frozen=True)
class TlsConfig:
    server_cert: Path
    server_key: Path
    root_cert: Path | None = None
    mutual: bool = False  # require and verify client certificates against root_cert


@dataclass(frozen=True)
class MetricsConfig:
    enabled: bool = True
    address: str = "0.0.0.0"
    port: int = 8002
    gpu: bool = True  # --allow-gpu-metrics (exported only where NVML finds a GPU)
    interval_ms: int = 2000  # --metrics-interval-ms: how often GPU and CPU metrics are read
    latency: LatencyMetrics = field(default_factory=LatencyMetrics)  # --metrics-config
    cpu: bool = True  # --allow-cpu-metrics (exported only where /proc can be read)


@dataclass(frozen=True)
class ServerConfig:
    model_repositories: tuple[Path, ...]
    server_id: str = SERVER_ID  # --id: the name ServerMetadata reports
    grpc_address: str = "0.0.0.0"
    grpc_port: int = 8001
    grpc_max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    grpc_local_socket: str = ""
    grpc_reuse_port: bool = False
    strict_readiness: bool = True
    exit_on_error: bool = True  # a start-up model that fails to load ends the start (exit 1)
    exit_timeout_secs: float = 30.0
    lame_duck_secs: float = 0.0  # after SIGTERM, unary calls on open connections served
    model_control_mode: str = "none"
    load_models: tuple[str, ...] = ()
    repository_poll_secs: float = 15.0
    cache_size_bytes: int = 0  # 0: no response cache
    max_instances_per_model: int = DEFAULT_MAX_INSTANCES  # more instances fail to load
    log: LogSettings = field(default_factory=LogSettings)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    trace: TraceSettings = field(default_factory=TraceSettings)
    tls: TlsConfig | None = None
    restricted: tuple[Restriction, ...] = ()
    frontends: int = 0  # gRPC frontend processes over one engine process; 0: one process
    # --grpc-header-forward-pattern, compiled as Triton applies it (case-insensitive).
    header_forward: re.Pattern[str] | None = None


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


def _tls(args: argparse.Namespace) -> TlsConfig | None:
    if not (args.grpc_use_ssl or args.grpc_use_ssl_mutual):
        return None
    if args.grpc_server_cert is None or args.grpc_server_key is None:
        raise argparse.ArgumentTypeError(
            "--grpc-use-ssl needs --grpc-server-cert and --grpc-server-key"
        )
    if args.grpc_use_ssl_mutual and args.grpc_root_cert is None:
        raise argparse.ArgumentTypeError("--grpc-use-ssl-mutual needs --grpc-root-cert")
    for path in (args.grpc_server_cert, args.grpc_server_key, args.grpc_root_cert):
        if path is not None and not path.is_file():
            raise argparse.ArgumentTypeError(f"TLS file '{path}' is not a readable file")
    return TlsConfig(
        args.grpc_server_cert, args.grpc_server_key, args.grpc_root_cert, args.grpc_use_ssl_mutual
    )


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
    if args.log_verbose < 0:
        parser.error("--log-verbose must be >= 0")
    if not 0 <= args.frontends <= 256:
        parser.error("--frontends must be in 0..256")
    if args.metrics_interval_ms <= 0:
        parser.error("--metrics-interval-ms must be positive")
    if args.lame_duck_secs < 0:
        parser.error("--lame-duck-secs must be >= 0")
    if args.max_instances_per_model < 1:
        parser.error("--max-instances-per-model must be at least 1")
    try:
        cache_size = _cache_size(args.cache_config)
        restricted = parse_restrictions(
            args.grpc_restricted_protocol, "--grpc-restricted-protocol", "protocol"
        )
        tls = _tls(args)
        trace = parse_trace_config(args.trace_config)
        latency = parse_metrics_config(args.metrics_config)
    except (argparse.ArgumentTypeError, ValueError) as exc:
        parser.error(str(exc))
    return ServerConfig(
        model_repositories=tuple(args.model_repositories),
        server_id=args.server_id,
        grpc_address=args.grpc_address,
        grpc_port=args.grpc_port,
        grpc_max_message_bytes=args.grpc_max_message_bytes,
        grpc_local_socket=args.grpc_local_socket,
        grpc_reuse_port=args.reuse_grpc_port,
        strict_readiness=args.strict_readiness,
        exit_on_error=args.exit_on_error,
        exit_timeout_secs=args.exit_timeout_secs,
        lame_duck_secs=args.lame_duck_secs,
        model_control_mode=args.model_control_mode,
        load_models=tuple(args.load_models),
        repository_poll_secs=args.repository_poll_secs,
        cache_size_bytes=cache_size,
        max_instances_per_model=args.max_instances_per_model,
        log=LogSettings(
            verbose_level=args.log_verbose,
            info=args.log_info,
            warning=args.log_warning,
            error=args.log_error,
            format=args.log_format,
            file=args.log_file,
        ),
        metrics=MetricsConfig(
            args.allow_metrics,
            args.metrics_address,
            args.metrics_port,
            gpu=args.allow_gpu_metrics,
            interval_ms=args.metrics_interval_ms,
            latency=latency,
            cpu=args.allow_cpu_metrics,
        ),
        trace=trace,
        tls=tls,
        restricted=restricted,
        frontends=args.frontends,
        header_forward=pattern_flag(
            parser, "--grpc-header-forward-pattern", args.grpc_header_forward_pattern
        ),
    )
