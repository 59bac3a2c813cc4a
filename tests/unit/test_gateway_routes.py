"""The gateway's route table comes from the (inference.http_route) options on the protos.

The first test is the guard the REST gateway issue asks for: an RPC added to
GRPCInferenceService without an HTTP route (and not on the explicit exclude list) fails.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from google.protobuf import descriptor_pb2

from gateway.errors import GatewayError
from gateway.routes import SERVICE, UNROUTED_RPCS, Router, load_routes
from inference import http_route_pb2 as hr

#: RPCs that must not have a route. Kept here as well as in gateway.routes so that adding
#: a name there is a reviewed change to this test too.
EXCLUDED: frozenset[str] = frozenset()


def test_every_rpc_has_a_route_or_is_excluded() -> None:
    assert UNROUTED_RPCS == EXCLUDED
    rpcs = {m.name for m in SERVICE.methods}
    routed = {r.rpc for r in load_routes()}
    missing = rpcs - routed - EXCLUDED
    assert not missing, f"RPCs without an (inference.http_route) option: {sorted(missing)}"
    assert not (routed & EXCLUDED)
    assert len(rpcs) == 20


class _UnroutedMethod:
    """A new RPC without the option (only what load_routes reads of a method)."""

    name = "BrandNewRpc"

    def GetOptions(self) -> descriptor_pb2.MethodOptions:
        return descriptor_pb2.MethodOptions()


def test_load_routes_refuses_a_service_with_an_unrouted_rpc() -> None:
    service = SimpleNamespace(methods=[*SERVICE.methods, _UnroutedMethod()])
    with pytest.raises(ValueError, match="BrandNewRpc"):
        load_routes(service)


def test_inconsistent_options_fail_at_start() -> None:
    method = SERVICE.methods_by_name["ServerLive"]
    options = descriptor_pb2.MethodOptions()
    options.Extensions[hr.http_route].get = "/v2/health/{nope}"

    class Broken:
        name = method.name
        input_type = method.input_type
        output_type = method.output_type

        def GetOptions(self) -> descriptor_pb2.MethodOptions:
            return options

    with pytest.raises(ValueError, match="not a string field"):
        load_routes(SimpleNamespace(methods=[Broken()]))
    options.Extensions[hr.http_route].get = "/v2/health/live"
    options.Extensions[hr.http_route].response_body = "missing"
    with pytest.raises(ValueError, match="'missing' is not a field"):
        load_routes(SimpleNamespace(methods=[Broken()]))


def test_bindings_are_checked_against_the_messages() -> None:
    routes = {r.rpc: r for r in load_routes()}
    infer = routes["ModelInfer"]
    assert infer.codec == hr.HTTP_CODEC_INFER
    assert [(b.method, b.template, b.variables) for b in infer.bindings] == [
        ("POST", "/v2/models/{model_name}/infer", ("model_name",)),
        (
            "POST",
            "/v2/models/{model_name}/versions/{model_version}/infer",
            ("model_name", "model_version"),
        ),
    ]
    assert routes["ServerLive"].status_field == "live"
    assert routes["ModelConfig"].response_body == "config"
    assert routes["RepositoryIndex"].omit_defaults
    assert routes["SystemSharedMemoryStatus"].map_values


@pytest.fixture(scope="module")
def router() -> Router:
    return Router(load_routes())


@pytest.mark.parametrize(
    ("method", "path", "rpc", "params"),
    [
        ("GET", "/v2", "ServerMetadata", {}),
        ("GET", "/v2/health/live", "ServerLive", {}),
        ("GET", "/v2/models/stats", "ModelStatistics", {}),
        ("GET", "/v2/models/stats/ready", "ModelReady", {"name": "stats"}),
        ("GET", "/v2/models/m%2Fx/versions/3", "ModelMetadata", {"name": "m/x", "version": "3"}),
        ("GET", "/v2/models/m/versions/3/stats", "ModelStatistics", {"name": "m", "version": "3"}),
        ("POST", "/v2/models/m/infer", "ModelInfer", {"model_name": "m"}),
        ("POST", "/v2/models/m/generate_stream", "ModelStreamInfer", {"model_name": "m"}),
        ("POST", "/v2/repository/models/m/load", "RepositoryModelLoad", {"model_name": "m"}),
        (
            "POST",
            "/v2/repository/r/models/m/unload",
            "RepositoryModelUnload",
            {"repository_name": "r", "model_name": "m"},
        ),
        ("POST", "/v2/trace/setting", "TraceSetting", {}),
        ("GET", "/v2/models/m/trace/setting", "TraceSetting", {"model_name": "m"}),
        (
            "POST",
            "/v2/cudasharedmemory/region/r0/unregister",
            "CudaSharedMemoryUnregister",
            {"name": "r0"},
        ),
    ],
)
def test_match(router: Router, method: str, path: str, rpc: str, params: dict[str, str]) -> None:
    route, _, got = router.match(method, path.encode())
    assert (route.rpc, got) == (rpc, params)


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("GET", "/", 404),
        ("GET", "/v2/", 404),
        ("GET", "/v2/models//ready", 404),
        ("GET", "/v3", 404),
        ("GET", "v2", 404),
        ("POST", "/v2/models/m", 405),
        ("POST", "/v2/models/stats", 405),
        ("GET", "/v2/models/m/infer", 405),
        ("GET", "/v2/%ff", 400),
    ],
)
def test_no_match(router: Router, method: str, path: str, status: int) -> None:
    with pytest.raises(GatewayError) as info:
        router.match(method, path.encode())
    assert info.value.status == status


def test_duplicate_bindings_are_refused() -> None:
    routes = load_routes()
    with pytest.raises(ValueError, match="declared twice"):
        Router([*routes, routes[0]])
