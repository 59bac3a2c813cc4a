"""The server's command line: every flag, named and defaulted as Triton's.

``config.parse_args`` turns what this parser reads into one frozen ``ServerConfig``;
this module only says which flags exist, their types and their help.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from wire.api_groups import API_GROUPS

from . import SERVER_ID
from .core.lifecycle import DEFAULT_LOAD_THREADS
from .repository.limits import DEFAULT_MAX_INSTANCES
from .telemetry.settings import LOG_FORMATS
from .triton_flags import FlagError, add_flags, parse_int

__all__ = [
    "DEFAULT_MAX_MESSAGE_BYTES",
    "build_parser",
    "default_frontends",
]

# Triton's default: the largest message gRPC can carry (2 GiB - 1).
DEFAULT_MAX_MESSAGE_BYTES = 2**31 - 1


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


def _load_threads(text: str) -> int:
    """Triton's ``ParseOption<int>``, then at least one thread (its ``std::max(1u, n)``)."""
    try:
        return max(1, parse_int(text))
    except FlagError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _load_retries(text: str) -> int:
    """Triton's ``ParseOption<int>``; a negative count is no retry here (Triton's
    unsigned cast would make it about four billion)."""
    try:
        return max(0, parse_int(text))
    except FlagError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got '{text}'")


def _int_bool(text: str) -> int:
    """Triton's ``--log-verbose``: an integer, or true (1) / false (0)."""
    lowered = text.strip().lower()
    if lowered in ("true", "false"):
        return int(lowered == "true")
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"Invalid option value. Got {text}") from None


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
        type=str.lower,  # any case, as Triton
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
        "--model-load-thread-count",
        type=_load_threads,
        default=DEFAULT_LOAD_THREADS,
        metavar="<integer>",
        help="models loading at once (each model's instances open in parallel too)",
    )
    add(
        "--model-load-retry-count",
        type=_load_retries,
        default=0,
        metavar="<integer>",
        help="times a version that fails to load is tried again (Triton's; default 0)",
    )
    _flag(
        parser,
        "--model-namespacing",
        False,
        "one model name in several repositories: each repository is a namespace",
    )
    add(
        "--max-instances-per-model",
        type=int,
        default=DEFAULT_MAX_INSTANCES,
        help="refuse to load a model whose instance_group asks for more instances",
    )
    add(
        "--disable-auto-complete-config",
        action="store_true",
        help="models' configs are used as written: nothing is completed from the model",
    )
    add(
        "--strict-model-config",
        type=_bool,
        nargs="?",
        const=True,
        default=None,
        help="deprecated (Triton): true is --disable-auto-complete-config",
    )
    add(
        "--model-config-name",
        default=None,
        metavar="<string>",
        help="read each model's configs/<name>.pbtxt where it exists, else config.pbtxt",
    )
    add(
        "--backend-config",
        action="append",
        default=[],
        metavar="<string>,<string>=<string>",
        help="backend setting '<backend>,<key>=<value>', or '<key>=<value>' for every "
        "backend (e.g. python,shm-default-byte-size=4194304; default-max-batch-size=8)",
    )
    add(
        "--response-cache-byte-size",
        default=None,
        metavar="<integer>",
        help="deprecated (Triton): --cache-config=local,size=<bytes>",
    )
    add(
        "--cache-config",
        action="append",
        default=[],
        dest="cache_config",
        help="response cache, e.g. 'local,size=1048576' (bytes)",
    )
    # Logging
    add("--log-verbose", type=_int_bool, default=0, help="verbose logging level (0: off)")
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
        "'opentelemetry,url=http://collector:4318/v1/traces', 'triton,file=trace.json', "
        "'triton,log-frequency=50', 'mode=triton' (repeatable)",
    )
    # Triton's deprecated trace flags: the --trace-config settings they name.
    add("--trace-file", default=None, metavar="<string>", help="deprecated: triton,file=")
    add("--trace-level", action="append", default=[], metavar="<string>", help="deprecated")
    add("--trace-rate", default=None, metavar="<integer>", help="deprecated: rate=")
    add("--trace-count", default=None, metavar="<integer>", help="deprecated: count=")
    add(
        "--trace-log-frequency",
        default=None,
        metavar="<integer>",
        help="deprecated: triton,log-frequency=",
    )
    # Access control and TLS
    add(
        "--grpc-restricted-protocol",
        action="append",
        default=[],
        metavar="<groups>:<key>=<value>",
        help=f"require metadata 'triton-grpc-protocol-<key>: <value>' for these groups "
        f"(comma-separated: {', '.join(API_GROUPS)}); repeatable",
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
    # The rest of tritonserver --help: Triton's syntax, checked in config.parse_args.
    add_flags(parser)
    return parser
