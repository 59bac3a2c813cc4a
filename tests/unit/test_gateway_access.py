"""The gateway's restricted-API table, flags and forwarded metadata (issue 8), in-process."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gateway.access import Access
from gateway.config import parse_args
from gateway.errors import GatewayError
from gateway.handlers import Handlers
from gateway.messages import HttpRequest
from gateway.routes import load_routes
from inference import grpc_service_pb2 as pb
from wire.api_groups import API_GROUPS, GROUP_METHODS, Restriction, api_group_name
from wire.api_groups import parse_restrictions as parse


def restricted_apis(specs: list[str]) -> tuple[Restriction, ...]:
    return parse(specs, "--http-restricted-api", "API")


def test_group_names_come_from_the_proto_enum() -> None:
    """The flags' group names are the ApiGroup values' names, in the enum's order."""
    from inference.api_group_pb2 import ApiGroup

    assert api_group_name(ApiGroup.API_GROUP_SHARED_MEMORY) == "shared-memory"
    assert [api_group_name(v) for v in ApiGroup.values() if v] == list(API_GROUPS)


def test_every_route_belongs_to_a_group() -> None:
    grouped = {rpc for rpcs in GROUP_METHODS.values() for rpc in rpcs}
    assert {route.rpc for route in load_routes()} <= grouped


def test_parse_restricted_specs() -> None:
    (rule,) = restricted_apis(["health, inference:My-Key=v=1"])
    assert rule == Restriction(frozenset({"health", "inference"}), "my-key", "v=1")
    assert "v=1" not in repr(rule)
    with pytest.raises(ValueError, match="restricted twice"):
        restricted_apis(["health:a=1", "health,metadata:b=2"])
    with pytest.raises(ValueError, match="unknown API group"):
        restricted_apis(["healthz:a=1"])


def test_flags(tmp_path: Path) -> None:
    cert = tmp_path / "c.pem"
    cert.write_text("x")
    config = parse_args(
        [
            "--http-restricted-api",
            "trace:k=v",
            "--grpc-use-ssl",
            "--grpc-root-cert",
            str(cert),
            "--https-cert",
            str(cert),
            "--https-key",
            str(cert),
            "--exit-timeout-secs",
            "2.5",
        ]
    )
    assert config.restricted[0].groups == frozenset({"trace"})
    assert config.grpc_tls is not None and config.grpc_tls.root_cert == cert
    assert config.https is not None and config.exit_timeout_secs == 2.5
    assert parse_args([]).grpc_tls is None


def test_check_and_metadata() -> None:
    access = Access(restricted_apis(["inference:key=secret"]))
    access.check("ServerLive", {})
    access.check("ModelInfer", {"key": "secret"})
    for headers in ({}, {"key": "secreT"}, {"key": "secret "}, {"key": "é"}):
        with pytest.raises(GatewayError) as info:
            access.check("ModelInfer", headers)
        assert info.value.status == 403
        assert info.value.message == "This API is restricted, expecting header 'key'"
    headers = {"traceparent": "00-a-b-01", "tracestate": "x=y", "key": "secret", "other": "1"}
    assert access.metadata(headers) == (
        ("traceparent", "00-a-b-01"),
        ("tracestate", "x=y"),
        ("triton-grpc-protocol-key", "secret"),
    )
    assert access.metadata({"traceparent": "bad\x01"}) == ()


class _Stub:
    """Stands in for the generated stub: records each call's metadata."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, Any]] = []

    def __getattr__(self, rpc: str) -> Any:
        def call(message: Any, metadata: Any = None) -> Any:
            self.seen.append((rpc, metadata))
            return pb.ServerReadyResponse(ready=True)

        return call


def test_handlers_send_the_request_metadata() -> None:
    handlers = Handlers.__new__(Handlers)
    stub = _Stub()
    handlers._stub = handlers._unary = stub  # type: ignore[assignment]
    handlers._target = "fake"
    route = next(r for r in load_routes() if r.rpc == "ServerReady")
    metadata = (("traceparent", "00-a-b-01"),)
    request = HttpRequest("GET", b"/v2/health/ready", {}, b"", metadata)
    response = handlers.handle(route, route.bindings[0], {}, request)
    assert response.status == 200
    assert stub.seen == [("ServerReady", metadata)]
