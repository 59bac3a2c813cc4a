"""The rest of ``tritonserver --help`` (2.51): flags read with Triton's value syntax and
checks (``src/command_line_parser.cc``), for features this server has in another form or
not at all.

``flags.build_parser`` declares them (raw strings, None when absent); ``config.parse_args``
calls ``read`` once, which validates every given value as Triton does (its error texts:
``Bad option: "--x".`` and the reason) and returns what the server uses (gRPC keepalive
arguments) and one note per given flag that has no effect here, logged once at start.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from dataclasses import dataclass

from wire.api_groups import parse_restrictions

__all__ = [
    "GRPC_CHANNEL_FLAGS",
    "GRPC_KEEPALIVE_DEFAULTS",
    "INERT_FLAGS",
    "FlagError",
    "TritonFlags",
    "add_flags",
    "parse_bool",
    "parse_int",
    "read",
]

_INT32 = (-(2**31), 2**31 - 1)
_INT64 = (-(2**63), 2**63 - 1)


class FlagError(ValueError):
    """A value Triton's parser refuses; ``str`` is Triton's text."""


def _integer(text: str, bounds: tuple[int, int], unsigned: bool = False) -> int:
    """``std::stoi`` / ``stoll`` / ``stoull``: leading blanks and sign, then digits; the
    rest is ignored. ``stoull`` takes a minus sign and wraps, as C does."""
    match = re.match(r"\s*([+-]?\d+)", text)
    if match is None:
        raise FlagError(f"Invalid option value. Got {text}")
    value = int(match.group(1))
    if unsigned:
        if abs(value) > 2**64 - 1:
            raise FlagError(f"Provided option value is out of bound. Got {text}")
        return value % 2**64
    if not bounds[0] <= value <= bounds[1]:
        raise FlagError(f"Provided option value is out of bound. Got {text}")
    return value


def parse_int(text: str) -> int:
    """``ParseOption<int>``."""
    return _integer(text, _INT32)


def parse_int64(text: str) -> int:
    return _integer(text, _INT64)


def parse_uint64(text: str) -> int:
    return _integer(text, _INT64, unsigned=True)


def parse_double(text: str) -> float:
    """``std::stod``: the longest leading decimal float."""
    match = re.match(
        r"\s*([+-]?(\d+\.?\d*([eE][+-]?\d+)?|\.\d+([eE][+-]?\d+)?|inf|nan))", text, re.I
    )
    if match is None:
        raise FlagError(f"Invalid option value. Got {text}")
    return float(match.group(1))


def parse_bool(text: str) -> bool:
    """``ParseOption<bool>``: true/on/1, false/off/0 in any case."""
    lowered = text.lower()
    if lowered in ("true", "on", "1"):
        return True
    if lowered in ("false", "off", "0"):
        return False
    raise FlagError(f"invalid value for bool option: {text}")


def _pair(delimiter: str, first: Callable[[str], object], second: Callable[[str], object]):  # type: ignore[no-untyped-def]
    """``ParsePairOption<T1, T2>(arg, delimiter)``."""

    def parse(text: str) -> tuple[object, object]:
        head, found, tail = text.partition(delimiter)
        if not found:
            raise FlagError(
                "Cannot parse pair option due to incorrect number of inputs."
                f"--<pair option> argument requires format <first>{delimiter}<second>. "
                f"Found: {text}"
            )
        return first(head), second(tail)

    return parse


def _generic(option: str, first: str, config_name: str) -> Callable[[str], tuple[str, str, str]]:
    """``ParseGenericConfigOption``: ``<name><first><setting>=<value>``, all three non-empty."""

    def parse(text: str) -> tuple[str, str, str]:
        error = f"--{option} option format is '<{config_name}>{first}<setting>=<value>'. Got {text}"
        name, found, rest = text.partition(first)
        setting, equals, value = rest.partition("=")
        if not found or not equals or not (name and setting and value):
            raise FlagError(error)
        return name, setting, value

    return parse


def _choice(option: str, choices: tuple[str, ...]) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text.lower() not in choices:
            raise FlagError(f"invalid argument for --{option}")
        return text.lower()

    return parse


def _rate_limit_resource(text: str) -> tuple[str, int, int]:
    """``<name>:<count>`` or ``<name>:<count>:<device>``."""
    error = (
        "rate-limit-resource option format is '<resource_name>:<count>:<device>' or "
        f"'<resource_name>:<count>'. Got {text}"
    )
    parts = text.split(":")
    if len(parts) not in (2, 3):
        raise FlagError(error)
    return parts[0], parse_int(parts[1]), parse_int(parts[2]) if len(parts) == 3 else -1


def _http_restricted_api(text: str) -> object:
    try:
        return parse_restrictions([text], "--http-restricted-api", "api")
    except ValueError as exc:
        raise FlagError(str(exc)) from None


def _text(text: str) -> str:
    return text


def _model_config_name(text: str) -> str:
    if not text:
        raise FlagError("Error: empty argument for --model-config-name")
    return text


@dataclass(frozen=True)
class _Inert:
    name: str
    parse: Callable[[str], object]
    metavar: str
    why: str
    repeat: bool = False


_GATEWAY = "HTTP is served by the REST gateway process (python -m gateway), which takes it"
_ENDPOINT = "this server has no SageMaker / Vertex AI endpoint"
_NATIVE = "this server loads no shared-library backends, repository agents or caches"
_GPU = "no pooled device memory here: tensors are copied by the backends themselves"

#: Flags accepted, checked as Triton checks them, and logged once as having no effect.
INERT_FLAGS: tuple[_Inert, ...] = (
    _Inert("enable-peer-access", parse_bool, "<boolean>", "no CUDA peer access is set up"),
    _Inert("allow-http", parse_bool, "<boolean>", _GATEWAY),
    _Inert("http-address", _text, "<string>", _GATEWAY),
    _Inert("http-port", parse_int, "<integer>", _GATEWAY),
    _Inert("reuse-http-port", parse_bool, "<boolean>", _GATEWAY),
    _Inert("http-header-forward-pattern", _text, "<string>", _GATEWAY),
    _Inert("http-thread-count", parse_int, "<integer>", _GATEWAY),
    _Inert(
        "http-restricted-api",
        _http_restricted_api,
        "<string>:<string>=<string>",
        _GATEWAY,
        repeat=True,
    ),
    _Inert("allow-grpc", parse_bool, "<boolean>", "gRPC is this server's protocol: always on"),
    _Inert("grpc-infer-allocation-pool-size", parse_int, "<integer>", "no request object pool"),
    _Inert(
        "grpc-infer-response-compression-level",
        _choice("grpc_infer_response_compression_level", ("none", "low", "medium", "high")),
        "<string>",
        "responses are sent uncompressed unless the client asks",
    ),
    _Inert("allow-sagemaker", parse_bool, "<boolean>", _ENDPOINT),
    _Inert("sagemaker-port", parse_int, "<integer>", _ENDPOINT),
    _Inert(
        "sagemaker-safe-port-range",
        _pair("-", parse_int, parse_int),
        "<integer>-<integer>",
        _ENDPOINT,
    ),
    _Inert("sagemaker-thread-count", parse_int, "<integer>", _ENDPOINT),
    _Inert("allow-vertex-ai", parse_bool, "<boolean>", _ENDPOINT),
    _Inert("vertex-ai-port", parse_int, "<integer>", _ENDPOINT),
    _Inert("vertex-ai-thread-count", parse_int, "<integer>", _ENDPOINT),
    _Inert("vertex-ai-default-model", _text, "<string>", _ENDPOINT),
    _Inert("backend-directory", _text, "<string>", _NATIVE),
    _Inert("repoagent-directory", _text, "<string>", _NATIVE),
    _Inert("cache-directory", _text, "<string>", _NATIVE),
    _Inert("pinned-memory-pool-byte-size", parse_int64, "<integer>", _GPU),
    _Inert(
        "cuda-memory-pool-byte-size",
        _pair(":", parse_int, parse_uint64),
        "<integer>:<integer>",
        _GPU,
        repeat=True,
    ),
    _Inert(
        "cuda-virtual-address-size",
        _pair(":", parse_int, parse_uint64),
        "<integer>:<integer>",
        "implicit state is host memory here",
        repeat=True,
    ),
    _Inert(
        "min-supported-compute-capability",
        parse_double,
        "<float>",
        "every GPU ONNX Runtime can use is used",
    ),
    _Inert("buffer-manager-thread-count", parse_int, "<integer>", _GPU),
    _Inert(
        "host-policy",
        _generic("host-policy", ",", "policy name"),
        "<string>,<string>=<string>",
        "no host policies (NUMA node, CPU cores)",
        repeat=True,
    ),
    _Inert(
        "model-load-gpu-limit",
        _pair(":", parse_int, parse_double),
        "<device_id>:<fraction>",
        "GPU memory is not checked before a load",
        repeat=True,
    ),
)

#: Triton's gRPC keepalive flags -> grpc core's server arguments (honoured).
GRPC_CHANNEL_FLAGS: tuple[tuple[str, str], ...] = (
    ("grpc-keepalive-time", "grpc.keepalive_time_ms"),
    ("grpc-keepalive-timeout", "grpc.keepalive_timeout_ms"),
    ("grpc-keepalive-permit-without-calls", "grpc.keepalive_permit_without_calls"),
    ("grpc-http2-max-pings-without-data", "grpc.http2.max_pings_without_data"),
    (
        "grpc-http2-min-recv-ping-interval-without-data",
        "grpc.http2.min_ping_interval_without_data_ms",
    ),
    ("grpc-http2-max-ping-strikes", "grpc.http2.max_ping_strikes"),
    ("grpc-max-connection-age", "grpc.max_connection_age_ms"),
    ("grpc-max-connection-age-grace", "grpc.max_connection_age_grace_ms"),
)


#: Triton's KeepAliveOptions (src/grpc/grpc_server.h, 2.51), set on its server whether or
#: not a flag is given; the two connection ages only when not 0. Pinned here rather than
#: left to grpc's own defaults (the same today), so that the ping policy external clients
#: meet is Triton's whatever grpc release runs. The REST gateway's keepalive must fit the
#: policy (gateway/channel.py): a call that carries no data and is pinged more often than
#: the min recv ping interval gets a strike for each such ping, and its connection is
#: closed ("Too many pings") at the third.
GRPC_KEEPALIVE_DEFAULTS: dict[str, int] = {
    "grpc.keepalive_time_ms": 7_200_000,
    "grpc.keepalive_timeout_ms": 20_000,
    "grpc.keepalive_permit_without_calls": 0,
    "grpc.http2.max_pings_without_data": 2,
    "grpc.http2.min_ping_interval_without_data_ms": 300_000,
    "grpc.http2.max_ping_strikes": 2,
}
_ZERO_IS_UNSET = ("grpc.max_connection_age_ms", "grpc.max_connection_age_grace_ms")


def _dest(name: str) -> str:
    return name.replace("-", "_")


def add_flags(parser: argparse.ArgumentParser) -> None:
    """Declare the inert and the gRPC channel flags (raw text; checked by ``read``)."""
    for flag in INERT_FLAGS:
        parser.add_argument(
            f"--{flag.name}",
            action="append" if flag.repeat else "store",
            metavar=flag.metavar,
            help=f"accepted as Triton's, no effect here: {flag.why}",
        )
    for name, arg in GRPC_CHANNEL_FLAGS:
        kind = "<boolean>" if name.endswith("without-calls") else "<integer>"
        parser.add_argument(f"--{name}", metavar=kind, help=f"gRPC server argument {arg}")
    parser.add_argument(
        "--rate-limit",
        metavar="<string>",
        help="execution_count: instances run when their rate_limiter resources are free "
        "(Triton's rate limiter); off (default): as they are free",
    )
    parser.add_argument(
        "--rate-limit-resource",
        action="append",
        metavar="<string>:<integer>:<integer>",
        help="<name>:<count>[:<device>]: a resource's count for the rate limiter",
    )


@dataclass(frozen=True)
class TritonFlags:
    """What ``read`` found: gRPC server arguments, and the no-effect notes to log."""

    grpc_arguments: tuple[tuple[str, int], ...] = ()
    notes: tuple[str, ...] = ()
    rate_limit: bool = False  # --rate-limit=execution_count
    rate_limit_resources: tuple[tuple[str, int, int], ...] = ()  # (name, count, device|-1)


def bad_option(name: str, reason: str) -> str:
    """Triton's parse error: the option, then why."""
    return f'Bad option: "--{name}".\n{reason}'


def read(args: argparse.Namespace) -> TritonFlags:
    """Check every given value as Triton does (FlagError with its text)."""
    notes: list[str] = []
    for flag in INERT_FLAGS:
        given = getattr(args, _dest(flag.name))
        if given is None:
            continue
        for value in given if flag.repeat else [given]:
            try:
                flag.parse(value)
            except FlagError as exc:
                raise FlagError(bad_option(flag.name, str(exc))) from None
        notes.append(f"--{flag.name} has no effect here: {flag.why}")
    arguments = dict(GRPC_KEEPALIVE_DEFAULTS)
    for name, arg in GRPC_CHANNEL_FLAGS:
        given = getattr(args, _dest(name))
        if given is None:
            continue
        try:
            value = int(parse_bool(given)) if name.endswith("without-calls") else parse_int(given)
        except FlagError as exc:
            raise FlagError(bad_option(name, str(exc))) from None
        if value or arg not in _ZERO_IS_UNSET:
            arguments[arg] = value
    try:
        mode = _choice("rate-limit", ("execution_count", "off"))(args.rate_limit or "off")
    except FlagError as exc:
        raise FlagError(bad_option("rate-limit", str(exc))) from None
    resources = []
    for given in args.rate_limit_resource or ():
        try:
            resources.append(_rate_limit_resource(given))
        except FlagError as exc:
            raise FlagError(bad_option("rate-limit-resource", str(exc))) from None
    return TritonFlags(
        tuple(arguments.items()), tuple(notes), mode == "execution_count", tuple(resources)
    )
