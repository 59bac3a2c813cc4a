"""Server settings: one frozen object built from the command line (flags named as Triton's)."""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from . import SERVER_ID
from .handlers.header_forward import compile_forward_pattern
from .repository.limits import DEFAULT_MAX_INSTANCES
from .telemetry.metrics_config import LatencyMetrics, parse_metrics_config
from .telemetry.settings import LOG_FORMATS, LogSettings, TraceSettings, parse_trace_config

__all__ = [
    "DEFAULT_MAX_MESSAGE_BYTES",
    "PROTOCOL_GROUPS",
    "MetricsConfig",
    "RestrictedProtocol",
    "ServerConfig",
    "TlsConfig",
    "parse_args",
]

# Triton's default: the largest message gRPC can carry (2 GiB - 1).
DEFAULT_MAX_MESSAGE_BYTES = 2**31 - 1

#: Triton's protocol groups for --grpc-restricted-protocol.
PROTOCOL_GROUPS = (
    "health",
    "metadata",
    "inference",
    "shared-memory",
    "model-config",
    "model-repository",
    "statistics",
    "trace",
    "logging",
)


@dataclass(frozen=True)
class RestrictedProtocol:
    """Groups that need ``key: value`` in the caller's metadata. The value never prints."""

    groups: frozenset[str]
    key: str
    value: str = field(repr=False)


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
    restricted: tuple[RestrictedProtocol, ...] = ()
    frontends: int = 0  # gRPC frontend processes over one engine process; 0: one process
    # --grpc-header-forward-pattern, compiled as Triton applies it (case-insensitive).
    header_forward: re.Pattern[str] | None = None


def default_frontends() -> int:
    """One frontend process per core this process may use: the CPUs it may run on, or
    fewer when its cgroup has a CPU quota (a container's CPU limit)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cores = os.cpu_count() or 1
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()[:2]
        if quota != "max":
            cores = min(cores, max(1, -(-int(quota) // int(period))))
    except (OSError, ValueError):
        pass
    return cores


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


def _flag(parser: argparse.ArgumentParser, name: str, default: bool, text: str) -> None:
    """A Triton-style boolean: ``--x``, ``--x=true`` or ``--x=false``."""
    parser.add_argument(name, type=_bool, nargs="?", const=True, default=default, help=text)


def build_parser() -> argparse.ArgumentParser:
    invoked = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else ""
    parser = argparse.ArgumentParser(
        # As run: the console script (tritonserver), or python -m service.
        prog=invoked if invoked and invoked != "__main__.py" else "python -m service",
        description="Triton / KServe v2 compatible inference server (gRPC).",
    )
    add = parser.add_argument
    add(
        "--model-repository",
        "--model-store",
        action="append",
        required=True,
        type=Path,
        dest="model_repositories",
        help="model repository folder (repeatable)",
    )
    add(
        "--frontends",
        type=int,
        default=default_frontends(),
        help="gRPC frontend processes, all on the gRPC port, over one engine process that "
        "owns the models (default: one per core); 0: everything in this one process",
    )
    add("--id", default=SERVER_ID, dest="server_id", help="identifier for this server")
    add("--grpc-address", default="0.0.0.0", help="address to bind")
    add("--grpc-port", type=int, default=8001, help="0 picks a free port")
    add(
        "--grpc-max-message-size",
        type=_message_size,
        default=DEFAULT_MAX_MESSAGE_BYTES,
        dest="grpc_max_message_bytes",
        help="largest gRPC message sent or received, in bytes",
    )
    add(
        "--grpc-local-socket",
        default="",
        metavar="PATH",
        help="also serve the unary RPCs on a Unix socket at PATH, for a gateway on this host",
    )
    _flag(parser, "--reuse-grpc-port", False, "allow several servers on one port (SO_REUSEPORT)")
    _flag(parser, "--strict-readiness", True, "ready only when every model is ready")
    _flag(parser, "--exit-on-error", True, "exit at start-up when a model fails to load")
    add(
        "--exit-timeout-secs",
        type=float,
        default=30.0,
        help="on SIGTERM/SIGINT, how long in-flight requests may take to finish",
    )
    add(
        "--lame-duck-secs",
        type=float,
        default=0.0,
        help="after SIGTERM closes the listener, still serve new unary requests on open "
        "connections this long (behind a balancer that keeps connections); 0: refuse them "
        "at once, as Triton",
    )
    add(
        "--model-control-mode",
        choices=("none", "explicit", "poll"),
        default="none",
        help="none: load all at start; explicit: load/unload through the API; poll: follow "
        "repository changes",
    )
    add(
        "--load-model",
        action="append",
        default=[],
        dest="load_models",
        help="with --model-control-mode=explicit: load this model at start (repeatable; '*' all)",
    )
    add(
        "--repository-poll-secs",
        type=float,
        default=15.0,
        help="with --model-control-mode=poll: seconds between repository scans",
    )
    add(
        "--max-instances-per-model",
        type=int,
        default=DEFAULT_MAX_INSTANCES,
        help="refuse to load a model whose instance_group asks for more instances",
    )
    add(
        "--cache-config",
        action="append",
        default=[],
        dest="cache_config",
        help="response cache, e.g. 'local,size=1048576' (bytes)",
    )
    # Logging
    add("--log-verbose", type=int, default=0, help="verbose logging level (0: off)")
    _flag(parser, "--log-info", True, "log INFO messages")
    _flag(parser, "--log-warning", True, "log WARNING messages")
    _flag(parser, "--log-error", True, "log ERROR messages")
    add("--log-format", choices=LOG_FORMATS, default="default", help="line format")
    add("--log-file", default="", help="log to this file instead of stderr")
    # Metrics
    _flag(parser, "--allow-metrics", True, "serve Prometheus metrics")
    add("--metrics-address", default="0.0.0.0", help="address of the metrics endpoint")
    add("--metrics-port", type=int, default=8002, help="metrics port (0 picks a free port)")
    _flag(parser, "--allow-gpu-metrics", True, "export GPU metrics (needs the 'gpu' extra)")
    _flag(parser, "--allow-cpu-metrics", True, "export CPU metrics (read from Linux's /proc)")
    add(
        "--metrics-interval-ms",
        type=int,
        default=2000,
        help="milliseconds between readings of the per-interval (GPU, CPU) metrics",
    )
    add(
        "--metrics-config",
        action="append",
        default=[],
        metavar="<setting>=<value>",
        help="latency metric types (repeatable): summary_latencies=true, "
        "summary_quantiles=0.5:0.05,0.9:0.01,..., histogram_latencies=true, "
        "counter_latencies=false",
    )
    # Tracing
    add(
        "--trace-config",
        action="append",
        default=[],
        help="trace setting, e.g. 'rate=100', 'level=TIMESTAMPS', "
        "'opentelemetry,url=http://collector:4318/v1/traces' (repeatable)",
    )
    # Access control and TLS
    add(
        "--grpc-restricted-protocol",
        action="append",
        default=[],
        metavar="<groups>:<key>=<value>",
        help=f"require metadata 'triton-grpc-protocol-<key>: <value>' for these groups "
        f"(comma-separated: {', '.join(PROTOCOL_GROUPS)}); repeatable",
    )
    add(
        "--grpc-header-forward-pattern",
        metavar="REGEX",
        help="forward gRPC metadata whose key matches (case-insensitive; a leading (?-i) "
        "makes it case-sensitive) to the model as request parameters",
    )
    _flag(parser, "--grpc-use-ssl", False, "serve gRPC over TLS")
    _flag(parser, "--grpc-use-ssl-mutual", False, "TLS with client certificates (mutual TLS)")
    add("--grpc-server-cert", type=Path, help="PEM certificate chain of the server")
    add("--grpc-server-key", type=Path, help="PEM private key of the server")
    add("--grpc-root-cert", type=Path, help="PEM root certificates that sign client certs")
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


def _restricted(specs: Sequence[str]) -> tuple[RestrictedProtocol, ...]:
    """``<groups>:<key>=<value>``; a group may appear in one spec only (as in Triton)."""
    out: list[RestrictedProtocol] = []
    seen: set[str] = set()
    for spec in specs:
        groups_text, colon, pair = spec.partition(":")
        key, equals, value = pair.partition("=")
        groups = {g.strip() for g in groups_text.split(",") if g.strip()}
        if not colon or not equals or not groups or not key.strip() or not value:
            raise argparse.ArgumentTypeError(
                "--grpc-restricted-protocol: expected '<groups>:<key>=<value>'"
            )
        unknown = sorted(groups - set(PROTOCOL_GROUPS))
        if unknown:
            raise argparse.ArgumentTypeError(
                f"--grpc-restricted-protocol: unknown protocol group(s) {unknown}; "
                f"known: {', '.join(PROTOCOL_GROUPS)}"
            )
        twice = sorted(groups & seen)
        if twice:
            raise argparse.ArgumentTypeError(
                f"--grpc-restricted-protocol: protocol group(s) {twice} restricted twice"
            )
        seen |= groups
        out.append(RestrictedProtocol(frozenset(groups), key.strip().lower(), value))
    return tuple(out)


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
        restricted = _restricted(args.grpc_restricted_protocol)
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
        header_forward=_header_forward(parser, args),
    )


def _header_forward(
    parser: argparse.ArgumentParser, args: argparse.Namespace
) -> re.Pattern[str] | None:
    """An invalid pattern stops the start with exit code 1, as Triton's flag errors do."""
    text = args.grpc_header_forward_pattern
    if text is None:
        return None
    try:
        return compile_forward_pattern(text)
    except re.error as exc:
        parser.exit(
            1,
            f"{parser.prog}: error: --grpc-header-forward-pattern: invalid regular "
            f"expression '{text}': {exc.msg}\n",
        )
