"""``python -m gateway`` flags -> GatewayConfig (frozen); nothing happens at import."""

from __future__ import annotations

import argparse
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from inference.api_group_pb2 import ApiGroup

from .header_forward import compile_forward_pattern

__all__ = [
    "API_GROUPS",
    "DEFAULT_MAX_BODY_BYTES",
    "TRACE_EXPORTERS",
    "GatewayConfig",
    "GrpcTls",
    "HttpsConfig",
    "RestrictedApi",
    "TraceConfig",
    "api_group_name",
    "parse_args",
    "parse_trace_config",
]

#: Largest request body read (and largest inflated body); 1 GiB keeps one request from
#: exhausting memory while leaving room for large binary tensors.
DEFAULT_MAX_BODY_BYTES = 1 << 30


def api_group_name(value: int) -> str:
    """The command-line name of an ``inference.ApiGroup`` value (api_group.proto's rule:
    API_GROUP_SHARED_MEMORY is "shared-memory")."""
    return ApiGroup.Name(value).removeprefix("API_GROUP_").lower().replace("_", "-")


#: Triton's API groups for --http-restricted-api, in api_group.proto's order (the
#: service reads the same enum for --grpc-restricted-protocol).
API_GROUPS = tuple(api_group_name(value) for value in ApiGroup.values() if value)


@dataclass(frozen=True, slots=True)
class RestrictedApi:
    """Groups whose routes need the HTTP header ``key: value``. The value never prints."""

    groups: frozenset[str]
    key: str
    value: str = field(repr=False)


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


#: As the service's ``--trace-config opentelemetry,exporter=...``.
TRACE_EXPORTERS = ("otlp-http", "otlp-grpc", "console")


@dataclass(frozen=True, slots=True)
class TraceConfig:
    """The gateway's own spans, set with the service's ``--trace-config`` syntax (copied,
    not imported: the gateway does not import ``service``). Off until ``level=TIMESTAMPS``."""

    level: str = "OFF"  # OFF or TIMESTAMPS
    rate: int = 1000  # trace 1 request in ``rate`` (a caller's sampled traceparent: always)
    count: int = -1  # traces left to take; -1: no limit
    exporter: str = "otlp-http"
    url: str = "http://localhost:4318/v1/traces"
    resource: tuple[tuple[str, str], ...] = ()

    @property
    def on(self) -> bool:
        return self.level != "OFF" and self.count != 0


@dataclass(frozen=True, slots=True)
class GatewayConfig:
    grpc_target: str = "127.0.0.1:8001"
    #: --grpc-local-socket: the service's unary RPCs through its Unix socket (local_rpc.py).
    grpc_local_socket: str = ""
    http_address: str = "0.0.0.0"
    http_port: int = 8000
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    log_verbose: int = 0
    restricted: tuple[RestrictedApi, ...] = ()
    grpc_tls: GrpcTls | None = None
    https: HttpsConfig | None = None
    exit_timeout_secs: float = 30.0
    trace: TraceConfig = field(default_factory=TraceConfig)
    workers: int = 1
    #: --http-header-forward-pattern, compiled as Triton applies it (case-insensitive).
    header_forward: re.Pattern[str] | None = None


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


def restricted_apis(specs: Sequence[str]) -> tuple[RestrictedApi, ...]:
    """``<groups>:<key>=<value>`` (Triton's syntax); a group may appear in one spec only."""
    out: list[RestrictedApi] = []
    seen: set[str] = set()
    for spec in specs:
        groups_text, colon, pair = spec.partition(":")
        key, equals, value = pair.partition("=")
        groups = {g.strip() for g in groups_text.split(",") if g.strip()}
        if not colon or not equals or not groups or not key.strip() or not value:
            raise ValueError("--http-restricted-api: expected '<groups>:<key>=<value>'")
        unknown = sorted(groups - set(API_GROUPS))
        if unknown:
            raise ValueError(
                f"--http-restricted-api: unknown API group(s) {unknown}; "
                f"known: {', '.join(API_GROUPS)}"
            )
        twice = sorted(groups & seen)
        if twice:
            raise ValueError(f"--http-restricted-api: API group(s) {twice} restricted twice")
        seen |= groups
        out.append(RestrictedApi(frozenset(groups), key.strip().lower(), value))
    return tuple(out)


def _trace_int(name: str, text: str, minimum: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"--trace-config {name}: expected an integer, got '{text}'") from None
    if value < minimum:
        raise ValueError(f"--trace-config {name}: must be >= {minimum}, got {value}")
    return value


def parse_trace_config(specs: Sequence[str]) -> TraceConfig:
    """``key=value`` (level, rate, count) or ``opentelemetry,key=value`` (exporter, url,
    resource): the service's grammar, so one set of values configures both processes."""
    values: dict[str, object] = {}
    resource: list[tuple[str, str]] = []
    for spec in specs:
        mode, comma, setting = spec.partition(",")
        if not comma:
            mode, setting = "", spec
        key, equals, value = setting.partition("=")
        if not equals:
            raise ValueError(f"--trace-config '{spec}': expected [mode,]key=value")
        if mode not in ("", "opentelemetry"):
            raise ValueError(f"--trace-config '{spec}': only the opentelemetry mode is supported")
        if mode and key == "url":
            values["url"] = value if "://" in value else f"http://{value}"
        elif mode and key == "exporter":
            if value not in TRACE_EXPORTERS:
                raise ValueError(f"--trace-config exporter: one of {', '.join(TRACE_EXPORTERS)}")
            values["exporter"] = value
        elif mode and key == "resource":
            name, eq, text = value.partition("=")
            if not eq or not name:
                raise ValueError(f"--trace-config '{spec}': expected resource=<key>=<value>")
            resource.append((name, text))
        elif not mode and key == "level":
            if value not in ("OFF", "TIMESTAMPS"):
                raise ValueError("--trace-config level: OFF or TIMESTAMPS")
            values["level"] = value
        elif not mode and key == "rate":
            values["rate"] = _trace_int("rate", value, 1)
        elif not mode and key == "count":
            values["count"] = _trace_int("count", value, -1)
        elif not mode and key == "mode":
            if value != "opentelemetry":
                raise ValueError("--trace-config mode: only 'opentelemetry' is supported")
        else:
            raise ValueError(f"--trace-config '{spec}': unknown setting '{key}'")
    return TraceConfig(resource=tuple(resource), **values)  # type: ignore[arg-type]


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
        "service (default %(default)s; see docs/decisions.md for when more pay)",
    )
    opts = parser.parse_args(argv)
    try:
        restricted = restricted_apis(opts.http_restricted_api)
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
        https=https,
        exit_timeout_secs=opts.exit_timeout_secs,
        trace=trace,
        workers=opts.workers,
        header_forward=_header_forward(parser, opts.http_header_forward_pattern),
    )


def _header_forward(parser: argparse.ArgumentParser, text: str | None) -> re.Pattern[str] | None:
    """An invalid pattern stops the start with exit code 1, as Triton's flag errors do."""
    if text is None:
        return None
    try:
        return compile_forward_pattern(text)
    except re.error as exc:
        parser.exit(
            1,
            f"{parser.prog}: error: --http-header-forward-pattern: invalid regular "
            f"expression '{text}': {exc.msg}\n",
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
