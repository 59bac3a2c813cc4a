"""Triton's restricted API groups: their command-line names, the RPCs each covers, and the
``<groups>:<key>=<value>`` flag that restricts them (``--grpc-restricted-protocol`` in the
service, ``--http-restricted-api`` in the gateway).

The groups are declared once, as the ``(inference.api_group)`` option on every RPC of the
v2 and the legacy v1 service (protos/inference/api_group.proto); both processes build the
same table from those descriptors here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from inference import api_group_pb2 as ag
from inference import grpc_service_pb2 as pb
from inference.api_group_pb2 import ApiGroup
from trtis import grpc_service_pb2 as v1

__all__ = ["API_GROUPS", "GROUP_METHODS", "Restriction", "api_group_name", "parse_restrictions"]


def api_group_name(value: int) -> str:
    """The command-line name of an ``inference.ApiGroup`` value (api_group.proto's rule:
    API_GROUP_SHARED_MEMORY is "shared-memory")."""
    return ApiGroup.Name(value).removeprefix("API_GROUP_").lower().replace("_", "-")


#: Triton's API groups, in api_group.proto's order.
API_GROUPS = tuple(api_group_name(value) for value in ApiGroup.values() if value)

_SERVICES = (
    pb.DESCRIPTOR.services_by_name["GRPCInferenceService"],
    v1.DESCRIPTOR.services_by_name["GRPCService"],
)

#: Which RPCs (of both services) each group covers. "health" also covers the standard
#: grpc.health.v1 service in the service, as in Triton; that service has no such option.
GROUP_METHODS: dict[str, tuple[str, ...]] = {
    api_group_name(value): tuple(
        method.name
        for service in _SERVICES
        for method in service.methods
        if value in method.GetOptions().Extensions[ag.api_group]  # type: ignore[index]
    )
    for value in ApiGroup.values()
    if value
}


@dataclass(frozen=True, slots=True)
class Restriction:
    """Groups whose calls need ``key: value`` (gRPC metadata or an HTTP header). The value
    never prints."""

    groups: frozenset[str]
    key: str
    value: str = field(repr=False)


def parse_restrictions(specs: Sequence[str], flag: str, noun: str) -> tuple[Restriction, ...]:
    """``<groups>:<key>=<value>`` (Triton's syntax); a group may appear in one spec only.
    Raises ValueError naming ``flag``; ``noun`` is Triton's word for a group there ("API" for
    HTTP, "protocol" for gRPC)."""
    out: list[Restriction] = []
    seen: set[str] = set()
    for spec in specs:
        groups_text, colon, pair = spec.partition(":")
        key, equals, value = pair.partition("=")
        groups = {g.strip() for g in groups_text.split(",") if g.strip()}
        if not colon or not equals or not groups or not key.strip() or not value:
            raise ValueError(f"{flag}: expected '<groups>:<key>=<value>'")
        unknown = sorted(groups - set(API_GROUPS))
        if unknown:
            raise ValueError(
                f"{flag}: unknown {noun} group(s) {unknown}; known: {', '.join(API_GROUPS)}"
            )
        twice = sorted(groups & seen)
        if twice:
            raise ValueError(f"{flag}: {noun} group(s) {twice} restricted twice")
        seen |= groups
        out.append(Restriction(frozenset(groups), key.strip().lower(), value))
    return tuple(out)
