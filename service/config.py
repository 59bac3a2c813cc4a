"""Server settings: one frozen object built from the command line (flags named as Triton's)."""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from wire.api_groups import Restriction, parse_restrictions
from wire.header_forward import pattern_flag

from . import SERVER_ID
from .backends.backend_config import BackendConfig, from_flags
from .flags import DEFAULT_MAX_MESSAGE_BYTES, build_parser, default_frontends
from .repository.limits import DEFAULT_MAX_INSTANCES
from .telemetry.metrics_config import LatencyMetrics, parse_metrics_config
from .telemetry.settings import LogSettings, TraceSettings, parse_trace_config
from .triton_flags import GRPC_KEEPALIVE_DEFAULTS, FlagError, bad_option, parse_int64, read

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
    model_load_thread_count: int = 4  # models loading at once (Triton's default)
    model_load_retry_count: int = 0  # times a failed version load is tried again
    model_namespacing: bool = False  # a model is known by its repository and name
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
    # --backend-config settings, and auto-complete (--disable-auto-complete-config)
    backends: BackendConfig = field(default_factory=BackendConfig)
    model_config_name: str = ""  # --model-config-name: configs/<name>.pbtxt when present
    # Triton's keepalive options, --grpc-keepalive-* and the like applied.
    grpc_arguments: tuple[tuple[str, int], ...] = tuple(GRPC_KEEPALIVE_DEFAULTS.items())
    rate_limit: bool = False  # --rate-limit=execution_count
    rate_limit_resources: tuple[tuple[str, int, int], ...] = ()  # --rate-limit-resource
    # Triton's flags given that change nothing here: one line each, logged at start.
    notes: tuple[str, ...] = ()

    @property
    def lame_duck_s(self) -> float:
        """The lame duck a stop gets: --lame-duck-secs, at most half of the exit timeout."""
        return min(self.lame_duck_secs, self.exit_timeout_secs / 2)


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


def _warn(text: str) -> None:
    """Triton's parser warnings go to stderr before logging starts."""
    print(f"Warning: {text}", file=sys.stderr)


def _cache_specs(args: argparse.Namespace) -> list[str]:
    """--cache-config, or the deprecated --response-cache-byte-size (never both)."""
    if args.response_cache_byte_size is None:
        return list(args.cache_config)
    if args.cache_config:
        raise FlagError(
            "Error: Incompatible flags --response-cache-byte-size and --cache-config both "
            "provided. Please provide one or the other."
        )
    try:
        size = str(parse_int64(args.response_cache_byte_size))
    except FlagError as exc:
        raise FlagError(bad_option("response-cache-byte-size", str(exc))) from None
    _warn(
        "'--response-cache-byte-size' has been deprecated! This will default to the 'local' "
        "cache implementation with the provided byte size for its config. Please use "
        "'--cache-config' instead. The equivalent --cache-config CLI args would be: "
        f"'--cache-config=local,size={size}'"
    )
    return [f"local,size={size}"]


def _trace_specs(args: argparse.Namespace) -> list[str]:
    """The deprecated trace flags as the --trace-config settings they stand for, before
    the --trace-config ones (which override them, as in Triton)."""
    specs: list[str] = []
    deprecated = (
        ("trace_file", "--trace-file", "'--trace-config triton,file=<filepath>", "triton,file"),
        ("trace_rate", "--trace-rate", "'--trace-config rate=<rate value>", "rate"),
        ("trace_count", "--trace-count", "'--trace-config count=<count value>", "count"),
        (
            "trace_log_frequency",
            "--trace-log-frequency",
            "'--trace-config triton,log-frequency=<log frequency value>",
            "triton,log-frequency",
        ),
    )
    for level in args.trace_level:
        _warn(
            "'--trace-level' has been deprecated and will be removed in future releases. "
            "Please use '--trace-config level=<OFF|TIMESTAMPS|TENSORS> instead."
        )
        specs.append(f"level={level}")
    for dest, flag, instead, setting in deprecated:
        value = getattr(args, dest)
        if value is not None:
            _warn(
                f"'{flag}' has been deprecated and will be removed in future releases. "
                f"Please use {instead} instead."
            )
            specs.append(f"{setting}={value}")
    return specs + list(args.trace_config)


def _auto_complete(args: argparse.Namespace) -> bool:
    """--disable-auto-complete-config, or the deprecated --strict-model-config=true."""
    if args.strict_model_config is not None:
        _warn(
            "'--strict-model-config' has been deprecated! Please use "
            "'--disable-auto-complete-config' instead."
        )
    if args.disable_auto_complete_config:
        if args.strict_model_config is False:
            _warn(
                "Overriding deprecated '--strict-model-config' from False to True in favor "
                "of '--disable-auto-complete-config'!"
            )
        return False
    return not args.strict_model_config


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
    if args.model_config_name == "":
        parser.error(
            bad_option("model-config-name", "Error: empty argument for --model-config-name")
        )
    try:
        triton = read(args)
        cache_size = _cache_size(_cache_specs(args))
        restricted = parse_restrictions(
            args.grpc_restricted_protocol, "--grpc-restricted-protocol", "protocol"
        )
        tls = _tls(args)
        trace = parse_trace_config(_trace_specs(args))
        backends = from_flags(args.backend_config, _auto_complete(args))
        latency = parse_metrics_config(args.metrics_config)
    except (argparse.ArgumentTypeError, ValueError) as exc:
        parser.error(str(exc))
    return ServerConfig(
        model_repositories=tuple(dict.fromkeys(args.model_repositories)),  # a set, as Triton
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
        model_load_thread_count=args.model_load_thread_count,
        model_load_retry_count=args.model_load_retry_count,
        model_namespacing=args.model_namespacing,
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
        backends=backends,
        model_config_name=args.model_config_name or "",
        grpc_arguments=triton.grpc_arguments,
        rate_limit=triton.rate_limit,
        rate_limit_resources=triton.rate_limit_resources,
        notes=(*triton.notes, *backends.notes(), *_trace_notes(trace)),
    )


def _trace_notes(trace: TraceSettings) -> list[str]:
    return [f"--trace-config {spec} has no effect here" for spec in trace.ignored]
