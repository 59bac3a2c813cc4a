"""The route table, built once at start from the ``(inference.http_route)`` method options.

Every HTTP route is declared on the RPC it calls (protos/inference/grpc_service.proto, and
protos/trtis/grpc_service.proto for the legacy v1 API);
this module reads those options from the service descriptor, checks them against the
request and response messages (so a typo fails at start, not on a request), and matches
request paths with a segment trie: literal segments win over ``{variables}``, so
``/v2/models/stats`` is statistics, not the metadata of a model called "stats".
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from urllib.parse import unquote

from google.protobuf.descriptor import FieldDescriptor, MethodDescriptor

from inference import grpc_service_pb2 as pb
from inference import http_route_pb2 as hr
from trtis import grpc_service_pb2 as v1

from .descriptors import DescriptorT
from .errors import GatewayError

__all__ = [
    "UNROUTED_RPCS",
    "V1_SERVICE",
    "V1_UNROUTED_RPCS",
    "Binding",
    "Route",
    "Router",
    "load_routes",
    "load_v1_routes",
]

#: RPCs that deliberately have no HTTP route. Empty: even the bidirectional stream carries
#: the generate endpoints. load_routes() refuses a service whose other RPCs lack a route.
UNROUTED_RPCS: frozenset[str] = frozenset()

SERVICE = pb.DESCRIPTOR.services_by_name["GRPCInferenceService"]
_CACHE_SIZE = 4096

#: The legacy v1 service; its StreamInfer is gRPC only, as in v1.
V1_SERVICE = v1.DESCRIPTOR.services_by_name["GRPCService"]
V1_UNROUTED_RPCS: frozenset[str] = frozenset({"StreamInfer"})

# Scalar field types a v1 path variable may fill (v2 ones are strings only).
_V1_PATH_TYPES = frozenset(
    {FieldDescriptor.TYPE_STRING, FieldDescriptor.TYPE_INT64, FieldDescriptor.TYPE_ENUM}
)


@dataclass(frozen=True, slots=True)
class Binding:
    """One (HTTP method, path template, body rule) of a route; ``sse``: answer as
    server-sent events."""

    method: str
    template: str
    body: str
    variables: tuple[str, ...]
    sse: bool = False


@dataclass(frozen=True, slots=True)
class Route:
    """An RPC with its HTTP options; ``bindings`` lists every way to reach it."""

    rpc: str
    descriptor: MethodDescriptor
    codec: int
    response_body: str
    status_field: str
    false_error: str
    omit_defaults: bool
    map_values: bool
    bindings: tuple[Binding, ...]

    @property
    def input_type(self) -> DescriptorT:
        return self.descriptor.input_type

    @property
    def output_type(self) -> DescriptorT:
        return self.descriptor.output_type


def _bindings(rule: hr.HttpRoute) -> Iterator[hr.HttpRoute]:
    yield rule
    yield from rule.additional_bindings


def _binding(rpc: str, rule: hr.HttpRoute, request: DescriptorT, codec: int) -> Binding:
    which = rule.WhichOneof("pattern")
    if which is None:
        raise ValueError(f"{rpc}: an http_route binding has neither get nor post")
    template = str(getattr(rule, which))
    if not template.startswith("/"):
        raise ValueError(f"{rpc}: path {template!r} must start with '/'")
    variables = tuple(s[1:-1] for s in template.split("/") if s.startswith("{"))
    allowed = _V1_PATH_TYPES if codec == hr.HTTP_CODEC_V1 else {FieldDescriptor.TYPE_STRING}
    for name in variables:
        fd = request.fields_by_name.get(name)
        if fd is None or fd.type not in allowed or fd.is_repeated:
            raise ValueError(
                f"{rpc}: path variable {{{name}}} is not a string field of the request"
            )
    if rule.body not in ("", "*") and rule.body not in request.fields_by_name:
        raise ValueError(f"{rpc}: body {rule.body!r} is not a field of the request")
    return Binding(which.upper(), template, rule.body, variables, rule.server_sent_events)


def _route(method: MethodDescriptor) -> Route:
    rule: hr.HttpRoute = method.GetOptions().Extensions[hr.http_route]  # type: ignore[index]
    response = method.output_type
    for name in (rule.response_body, rule.status_field):
        if name and name not in response.fields_by_name:
            raise ValueError(f"{method.name}: {name!r} is not a field of {response.name}")
    if (rule.codec == hr.HTTP_CODEC_STATUS) != bool(rule.status_field):
        raise ValueError(f"{method.name}: status_field goes with HTTP_CODEC_STATUS, and only it")
    streams = any(b.server_sent_events for b in _bindings(rule))
    if streams and not (rule.codec == hr.HTTP_CODEC_GENERATE and method.server_streaming):
        raise ValueError(f"{method.name}: server_sent_events needs a generate route on a stream")
    return Route(
        rpc=method.name,
        descriptor=method,
        codec=rule.codec,
        response_body=rule.response_body,
        status_field=rule.status_field,
        false_error=rule.false_error,
        omit_defaults=rule.omit_defaults,
        map_values=rule.map_values,
        bindings=tuple(
            _binding(method.name, b, method.input_type, rule.codec) for b in _bindings(rule)
        ),
    )


def load_routes(service: object = SERVICE, unrouted: frozenset[str] = UNROUTED_RPCS) -> list[Route]:
    """Every routed RPC of the service; ValueError for a missing or inconsistent option."""
    routes: list[Route] = []
    missing: list[str] = []
    for method in service.methods:  # type: ignore[attr-defined]
        if not method.GetOptions().HasExtension(hr.http_route):
            if method.name not in unrouted:
                missing.append(method.name)
            continue
        routes.append(_route(method))
    if missing:
        raise ValueError(f"RPCs without an (inference.http_route) option: {missing}")
    return routes


def load_v1_routes() -> list[Route]:
    """The legacy v1 API's routes (/api/...)."""
    return load_routes(V1_SERVICE, V1_UNROUTED_RPCS)


@dataclass(slots=True)
class _Node:
    literal: dict[str, _Node] = field(default_factory=dict)
    variable: _Node | None = None
    endpoints: dict[str, tuple[Route, Binding]] = field(default_factory=dict)


class Router:
    """Path + method -> (route, binding, path variables); 404 and 405 as Triton answers."""

    def __init__(self, routes: list[Route]) -> None:
        self.routes = routes
        self._root = _Node()
        self._cache: dict[tuple[str, bytes], tuple[Route, Binding, dict[str, str]]] = {}
        for route in routes:
            for binding in route.bindings:
                node = self._root
                for segment in binding.template.strip("/").split("/"):
                    if segment.startswith("{"):
                        node.variable = node.variable or _Node()
                        node = node.variable
                    else:
                        node = node.literal.setdefault(segment, _Node())
                if binding.method in node.endpoints:
                    raise ValueError(f"{binding.method} {binding.template} is declared twice")
                node.endpoints[binding.method] = (route, binding)

    def match(self, method: str, raw_path: bytes) -> tuple[Route, Binding, dict[str, str]]:
        """The route for a request; answers are kept per (method, path), as clients send
        the same few paths over and over (bounded: the cache restarts when full)."""
        key = (method, raw_path)
        hit = self._cache.get(key)
        if hit is not None:
            return hit[0], hit[1], dict(hit[2])
        found = self._match(method, raw_path)
        if len(self._cache) >= _CACHE_SIZE:
            self._cache.clear()
        self._cache[key] = found
        return found[0], found[1], dict(found[2])

    def _match(self, method: str, raw_path: bytes) -> tuple[Route, Binding, dict[str, str]]:
        try:
            segments = [unquote(s, errors="strict") for s in raw_path.decode("ascii").split("/")]
        except (UnicodeDecodeError, ValueError):
            raise GatewayError(400, "malformed request path") from None
        if len(segments) < 2 or segments[0] != "":
            raise GatewayError(404, "Not Found")
        found_path = False
        for node, values in self._walk(self._root, segments[1:], []):
            found_path = True
            hit = node.endpoints.get(method)
            if hit is not None:
                route, binding = hit
                return route, binding, dict(zip(binding.variables, values, strict=True))
        if found_path:
            raise GatewayError(405, "Method Not Allowed")
        raise GatewayError(404, "Not Found")

    def _walk(
        self, node: _Node, rest: list[str], values: list[str]
    ) -> Iterator[tuple[_Node, list[str]]]:
        if not rest:
            if node.endpoints:
                yield node, values
            return
        head, tail = rest[0], rest[1:]
        child = node.literal.get(head)
        if child is not None:
            yield from self._walk(child, tail, values)
        if node.variable is not None and head:
            yield from self._walk(node.variable, tail, [*values, head])
