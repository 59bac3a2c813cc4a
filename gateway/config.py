"""``python -m gateway`` flags -> GatewayConfig (frozen); nothing happens at import."""

from __future__ import annotations

import argparse
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from wire.api_groups import API_GROUPS, Restriction, parse_restrictions
from wire.header_forward import pattern_flag
from wire.tracing import TRACE_EXPORTERS, TraceSettings, parse_trace_config

__all__ = [
    "DEFAULT_MAX_BODY_BYTES",
    "TRACE_EXPORTERS",
    "GatewayConfig",
    "GrpcTls",
    "HttpsConfig",
    "TraceSettings",
    "parse_args",
    "parse_trace_config",
]

#: Largest request body read (and largest inflated body); 1 GiB keeps one request from
#: exhausting memory while leaving room for large binary tensors.
DEFAULT_MAX_BODY_BYTES = 1 << 30


@dataclass(frozen=True, slots=True)
class GrpcTls:
    """TLS to the service; ``client_cert``/``client_key`` for mutual TLS."""

    root_cert: Path | None = None
    client_cert: Path | None = None
    client_key: Path | None = None


@dataclass(frozen=True, slots=True)
class HttpsConfig:
    """HTTPS on the gateway's socket; ``root_cert`` verifies client certificates (mutual
    TLS), which every connection must present when ``require_client_cert`` is set."""

    cert: Path
    key: Path
    root_cert: Path | None = None
    require_client_cert: bool = False


#: The service's ping policy, Triton's default (--grpc-http2-min-recv-ping-interval-
#: without-data, service/triton_flags.py GRPC_KEEPALIVE_DEFAULTS): a ping on a connection
#: whose calls carry no data, less than this after the one before, is a strike, and the
#: third strike closes the connection with every call on it ("Too many pings"). The
#: gateway always has a call open (its link, service_link.py), often a quiet one, and
#: REST requests wait on the same connection.
SERVICE_MIN_PING_INTERVAL_MS = 300_000
#: So the gateway pings no more often than that, with a margin (--grpc-keepalive-ms;
#: scripts/serve.sh sets it from the service's flag when one is given): a connection the
#: service stopped answering is still found, within minutes instead of hanging forever.
DEFAULT_KEEPALIVE_MS = SERVICE_MIN_PING_INTERVAL_MS * 11 // 10


#: As the service's ``--trace-config opentelemetry,exporter=...``.


@dataclass(frozen=True, slots=True)
class GatewayConfig:
    grpc_target: str = "127.0.0.1:8001"
    #: --grpc-local-socket: the service's unary RPCs through its Unix socket (local_rpc.py).
    grpc_local_socket: str = ""
    http_address: str = "0.0.0.0"
    http_port: int = 8000
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    log_verbose: int = 0
    restricted: tuple[Restriction, ...] = ()
    grpc_tls: GrpcTls | None = None
    #: --grpc-keepalive-ms: how often the channel pings the service (channel.py).
    grpc_keepalive_ms: int = DEFAULT_KEEPALIVE_MS
    https: HttpsConfig | None = None
    exit_timeout_secs: float = 30.0
    trace: TraceSettings = field(default_factory=TraceSettings)
    workers: int = 1
    #: --http-header-forward-pattern, compiled as Triton applies it (case-insensitive).
    header_forward: re.Pattern[str] | None = None

    @property
    def upstream(self) -> str:
        """The service this gateway calls, and how, for its start-up log line."""
        text = f"the gRPC service at {self.grpc_target}"
        if self.grpc_local_socket:
            text += f" (unary RPCs through its local socket {self.grpc_local_socket})"
        return text + f", keepalive pings every {self.grpc_keepalive_ms} ms"


_DEFAULTS = GatewayConfig()


def _positive(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def _non_negative(text: str) -> float:
    value = float(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be a non-negative number, got {text}")
    return value


def _readable(parser: argparse.ArgumentParser, flag: str, path: Path | None) -> None:
    if path is not None and not path.is_file():
        parser.error(f"{flag}: no such file: {path}")


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
    parser.add_argument(
        "--grpc-local-socket",
        default="",
        metavar="PATH",
        help="the service's --grpc-local-socket: unary RPCs go through it (streams stay on "
        "--grpc-target)",
    )
    parser.add_argument(
        "--grpc-keepalive-ms",
        type=_positive,
        default=DEFAULT_KEEPALIVE_MS,
        metavar="MS",
        help="keepalive ping interval to the service; at least the service's "
        "--grpc-http2-min-recv-ping-interval-without-data (Triton's default "
        f"{SERVICE_MIN_PING_INTERVAL_MS}), or quiet calls are cut off (default %(default)s)",
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
    parser.add_argument(
        "--http-restricted-api",
        action="append",
        default=[],
        metavar="<groups>:<key>=<value>",
        help="routes of these API groups need HTTP header <key>: <value> "
        f"(comma-separated: {', '.join(API_GROUPS)}); repeatable. The key is also "
        "forwarded to the service as gRPC metadata triton-grpc-protocol-<key>",
    )
    parser.add_argument(
        "--http-header-forward-pattern",
        metavar="REGEX",
        help="forward HTTP headers whose name matches (case-insensitive) to the model as "
        "request parameters of inference requests",
    )
    parser.add_argument("--grpc-use-ssl", action="store_true", help="talk TLS to the gRPC service")
    parser.add_argument(
        "--grpc-root-cert",
        type=Path,
        help="PEM root certificates that sign the service's certificate (default: system)",
    )
    parser.add_argument(
        "--grpc-client-cert", type=Path, help="PEM client certificate chain (mutual TLS)"
    )
    parser.add_argument("--grpc-client-key", type=Path, help="PEM client private key (mutual TLS)")
    parser.add_argument("--https-cert", type=Path, help="serve HTTPS with this PEM certificate")
    parser.add_argument("--https-key", type=Path, help="PEM private key for --https-cert")
    parser.add_argument(
        "--https-root-cert",
        type=Path,
        help="PEM CA certificates that verify HTTPS client certificates (mutual TLS); "
        "a client that presents none is still served unless --https-require-client-cert",
    )
    parser.add_argument(
        "--https-require-client-cert",
        action="store_true",
        help="refuse HTTPS connections without a client certificate signed by --https-root-cert",
    )
    parser.add_argument(
        "--trace-config",
        action="append",
        default=[],
        metavar="[opentelemetry,]<key>=<value>",
        help="the gateway's own spans, as the service's flag: 'level=TIMESTAMPS' turns them "
        "on, 'rate=N' traces 1 request in N (default 1000), 'count=N', "
        "'opentelemetry,exporter=otlp-http|otlp-grpc|console', "
        "'opentelemetry,url=http://collector:4318/v1/traces', "
        "'opentelemetry,resource=<key>=<value>' (repeatable)",
    )
    parser.add_argument(
        "--exit-timeout-secs",
        type=_non_negative,
        default=_DEFAULTS.exit_timeout_secs,
        help="on SIGTERM, how long in-flight requests may take to finish (default %(default)s)",
    )
    parser.add_argument(
        "--workers",
        type=_positive,
        default=_DEFAULTS.workers,
        help="gateway processes serving the HTTP port, each with its own channel to the "
        "service (default %(default)s; when more pay: docs/decisions/015-gateway-http-layer.md)",
    )
    opts = parser.parse_args(argv)
    try:
        restricted = parse_restrictions(opts.http_restricted_api, "--http-restricted-api", "API")
    except ValueError as exc:
        parser.error(str(exc))
    grpc_tls = None
    tls_files = (opts.grpc_root_cert, opts.grpc_client_cert, opts.grpc_client_key)
    if opts.grpc_use_ssl:
        if (opts.grpc_client_cert is None) != (opts.grpc_client_key is None):
            parser.error("--grpc-client-cert and --grpc-client-key go together")
        _readable(parser, "--grpc-root-cert", opts.grpc_root_cert)
        _readable(parser, "--grpc-client-cert", opts.grpc_client_cert)
        _readable(parser, "--grpc-client-key", opts.grpc_client_key)
        grpc_tls = GrpcTls(*tls_files)
    elif any(path is not None for path in tls_files):
        parser.error("--grpc-root-cert/--grpc-client-cert/--grpc-client-key need --grpc-use-ssl")
    https = _https(parser, opts)
    try:
        trace = parse_trace_config(opts.trace_config)
    except ValueError as exc:
        parser.error(str(exc))
    return GatewayConfig(
        grpc_target=opts.grpc_target,
        grpc_local_socket=opts.grpc_local_socket,
        http_address=opts.http_address,
        http_port=opts.http_port,
        max_body_bytes=opts.http_max_body_bytes,
        log_verbose=opts.log_verbose,
        restricted=restricted,
        grpc_tls=grpc_tls,
        grpc_keepalive_ms=opts.grpc_keepalive_ms,
        https=https,
        exit_timeout_secs=opts.exit_timeout_secs,
        trace=trace,
        workers=opts.workers,
        header_forward=pattern_flag(
            parser, "--http-header-forward-pattern", opts.http_header_forward_pattern
        ),
    )


def _https(parser: argparse.ArgumentParser, opts: argparse.Namespace) -> HttpsConfig | None:
    """HTTPS settings; an incomplete combination stops the start (exit 2) naming the flag."""
    if opts.https_require_client_cert and opts.https_root_cert is None:
        parser.error(
            "--https-require-client-cert needs --https-root-cert (the CA that signs the "
            "client certificates)"
        )
    if opts.https_cert is None and opts.https_key is None:
        if opts.https_root_cert is not None:
            parser.error("--https-root-cert needs --https-cert and --https-key")
        return None
    if opts.https_cert is None or opts.https_key is None:
        parser.error("--https-cert and --https-key go together")
    _readable(parser, "--https-cert", opts.https_cert)
    _readable(parser, "--https-key", opts.https_key)
    _readable(parser, "--https-root-cert", opts.https_root_cert)
    return HttpsConfig(
        opts.https_cert, opts.https_key, opts.https_root_cert, opts.https_require_client_cert
    )
