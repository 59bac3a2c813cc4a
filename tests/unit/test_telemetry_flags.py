"""The operations flags (metrics, logging, tracing, restricted protocols, TLS) and the
restricted-protocol method table."""

from __future__ import annotations

from pathlib import Path

import pytest
from grpc_health.v1 import health
from server_process import DEFAULT_REPOSITORY

from inference import grpc_service_pb2 as pb
from service.config import parse_args
from service.grpc_frontend import access
from service.grpc_frontend.servicer import InferenceServicer
from service.telemetry.settings import parse_trace_config
from trtis import grpc_service_pb2 as gs
from wire.api_groups import API_GROUPS as PROTOCOL_GROUPS
from wire.api_groups import Restriction

BASE = ["--model-repository", str(DEFAULT_REPOSITORY)]


def test_defaults() -> None:
    config = parse_args(BASE)
    assert (config.metrics.enabled, config.metrics.address, config.metrics.port) == (
        True,
        "0.0.0.0",
        8002,
    )
    assert config.log.format == "default" and config.log.info and config.log.verbose_level == 0
    assert config.tls is None and config.restricted == ()
    assert config.trace.level == "OFF" and config.trace.rate == 1000


def test_operations_flags() -> None:
    config = parse_args(
        [
            *BASE,
            "--allow-metrics=false",
            "--metrics-port=9102",
            "--metrics-address=127.0.0.1",
            "--log-verbose=2",
            "--log-info=false",
            "--log-warning",
            "--log-error=true",
            "--log-format=json",
            "--log-file=/tmp/x.log",
        ]
    )
    assert not config.metrics.enabled and config.metrics.port == 9102
    assert config.log.verbose_level == 2 and not config.log.info and config.log.warning
    assert (config.log.format, config.log.file) == ("json", "/tmp/x.log")


def test_restricted_protocols_parse_and_hide_the_value() -> None:
    config = parse_args(
        [
            *BASE,
            "--grpc-restricted-protocol=inference,health:Infer-Key=s3cret",
            "--grpc-restricted-protocol=model-repository:admin=other",
        ]
    )
    first, second = config.restricted
    assert first == Restriction(frozenset({"inference", "health"}), "infer-key", "s3cret")
    assert second.groups == {"model-repository"}
    assert "s3cret" not in repr(config)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("inference", "expected '<groups>:<key>=<value>'"),
        ("inference:key", "expected '<groups>:<key>=<value>'"),
        (":key=value", "expected '<groups>:<key>=<value>'"),
        ("inference:key=", "expected '<groups>:<key>=<value>'"),
        ("inference,admin:key=v", "unknown protocol group(s) ['admin']"),
    ],
)
def test_restricted_protocol_errors(
    spec: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        parse_args([*BASE, f"--grpc-restricted-protocol={spec}"])
    assert message in capsys.readouterr().err


def test_a_group_restricted_twice_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse_args(
            [
                *BASE,
                "--grpc-restricted-protocol=inference:a=1",
                "--grpc-restricted-protocol=health,inference:b=2",
            ]
        )
    assert "['inference'] restricted twice" in capsys.readouterr().err


def test_tls_flags(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cert, key, root = (tmp_path / n for n in ("cert.pem", "key.pem", "ca.pem"))
    for path in (cert, key, root):
        path.write_text("PEM")
    tls = [f"--grpc-server-cert={cert}", f"--grpc-server-key={key}"]
    config = parse_args([*BASE, "--grpc-use-ssl", *tls])
    assert config.tls is not None and not config.tls.mutual
    mutual = parse_args([*BASE, "--grpc-use-ssl-mutual=true", *tls, f"--grpc-root-cert={root}"])
    assert mutual.tls is not None and mutual.tls.mutual and mutual.tls.root_cert == root
    assert parse_args([*BASE, *tls]).tls is None  # files alone do not turn TLS on
    for argv, message in [
        (["--grpc-use-ssl", f"--grpc-server-cert={cert}"], "needs --grpc-server-cert and"),
        (["--grpc-use-ssl-mutual", *tls], "--grpc-use-ssl-mutual needs --grpc-root-cert"),
        (["--grpc-use-ssl", *tls[:1], f"--grpc-server-key={tmp_path}/no.pem"], "no.pem"),
    ]:
        with pytest.raises(SystemExit):
            parse_args([*BASE, *argv])
        assert message in capsys.readouterr().err


def test_trace_config() -> None:
    settings = parse_trace_config(
        [
            "level=TIMESTAMPS",
            "rate=10",
            "count=5",
            "mode=opentelemetry",
            "opentelemetry,url=collector:4318/v1/traces",
            "opentelemetry,exporter=console",
            "opentelemetry,resource=service.name=infer",
        ]
    )
    assert (settings.level, settings.rate, settings.count) == ("TIMESTAMPS", 10, 5)
    assert settings.url == "http://collector:4318/v1/traces"
    assert settings.exporter == "console"
    assert settings.resource == (("service.name", "infer"),)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("level=SOME", "invalid value for trace level option: SOME"),
        ("rate=0", "must be >= 1"),
        ("count=x", "expected an integer"),
        (
            "mode=zipkin",
            'invalid value for trace mode option: zipkin. Available options are "triton"',
        ),
        ("zipkin,file=x", "invalid value for trace mode option: zipkin"),
        (",file=x", "No trace mode specified"),
        ("triton,log-frequency=-1", "must be >= 0"),
        ("opentelemetry,exporter=zipkin", "one of otlp-http"),
        ("opentelemetry,resource=novalue", "expected resource=<key>=<value>"),
        ("level", "expected [mode,]key=value"),
    ],
)
def test_trace_config_errors(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("(", r"\(")):
        parse_trace_config([spec])


def test_every_rpc_belongs_to_exactly_one_group() -> None:
    """Every v2 RPC in exactly one group; every legacy v1 RPC in one too, except Status,
    which answers what three groups guard."""
    service = pb.DESCRIPTOR.services_by_name["GRPCInferenceService"]
    v1_service = gs.DESCRIPTOR.services_by_name["GRPCService"]
    grouped = [rpc for group in PROTOCOL_GROUPS for rpc in access.GROUP_METHODS[group]]
    v1_names = {m.name for m in v1_service.methods}
    assert sorted(r for r in grouped if r not in v1_names) == sorted(
        m.name for m in service.methods
    )
    v1_grouped = sorted(r for r in grouped if r in v1_names)
    expected = sorted([*v1_names, "Status", "Status"])
    assert v1_grouped == expected
    assert [g for g in PROTOCOL_GROUPS if "Status" in access.GROUP_METHODS[g]] == [
        g for g in PROTOCOL_GROUPS if g in ("metadata", "model-config", "statistics")
    ]


def test_only_restricted_methods_are_wrapped() -> None:
    """Unrestricted RPCs keep the plain bound method: no per-call cost at all."""
    servicer = InferenceServicer(None, 1024)  # type: ignore[arg-type]
    health_servicer = health.aio.HealthServicer()
    rules = [
        Restriction(frozenset({"inference"}), "k", "v"),
        Restriction(frozenset({"health"}), "h", "w"),
    ]
    guarded = access.restrict(servicer, health_servicer, rules)
    expected = ["ModelInfer", "ModelStreamInfer", "ServerLive", "ServerReady", "ModelReady"]
    assert sorted(guarded) == sorted([*expected, "Check", "Watch"])
    assert {"ModelInfer", "ModelStreamInfer", "ServerLive"} <= set(vars(servicer))
    assert not {"ModelMetadata", "ModelConfig", "LogSettings"} & set(vars(servicer))
    assert {"Check", "Watch"} <= set(vars(health_servicer))
