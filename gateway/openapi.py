"""The OpenAPI 3 document and the docs page, generated from the same route table.

Operations, path parameters and body/response schemas all come from the route options
and the request/response descriptors; only the v2 tensor JSON (infer) and generate have
hand-written schemas (openapi_schemas.py), because their JSON is not the proto's.
Nothing here is edited by hand per route.
"""

from __future__ import annotations

import html
from typing import Any

from google.protobuf.descriptor import FieldDescriptor

from inference import http_route_pb2 as hr

from .descriptors import DescriptorT, FieldT, is_map, is_parameter, value_list_field
from .openapi_schemas import (
    ERROR,
    ERROR_STATUSES,
    GENERATE_REQUEST,
    GENERATED,
    INFER_SCHEMAS,
    PARAMETER_VALUE,
)
from .routes import Binding, Route

__all__ = ["docs_page", "openapi_document"]

FD = FieldDescriptor
_SCALARS: dict[int, dict[str, Any]] = {
    FD.TYPE_BOOL: {"type": "boolean"},
    FD.TYPE_STRING: {"type": "string"},
    FD.TYPE_BYTES: {"type": "string", "format": "byte"},
    FD.TYPE_FLOAT: {"type": "number"},
    FD.TYPE_DOUBLE: {"type": "number"},
}
_UNSIGNED = {FD.TYPE_UINT32, FD.TYPE_UINT64, FD.TYPE_FIXED32, FD.TYPE_FIXED64}


class _Schemas:
    """JSON schemas of messages, each once under components/schemas by full name."""

    def __init__(self) -> None:
        self.components: dict[str, Any] = dict(INFER_SCHEMAS)

    def message(self, desc: DescriptorT, exclude: frozenset[str] = frozenset()) -> dict[str, Any]:
        if is_parameter(desc):
            return PARAMETER_VALUE
        listed = value_list_field(desc)
        if listed is not None:
            item = self.field_item(listed)
            return {"anyOf": [{"type": "array", "items": item}, item], "nullable": True}
        if exclude:
            return self._object(desc, exclude)
        name = desc.full_name
        if name not in self.components:
            self.components[name] = {}  # placeholder: breaks recursion
            self.components[name] = self._object(desc, exclude)
        return {"$ref": f"#/components/schemas/{name}"}

    def _object(self, desc: DescriptorT, exclude: frozenset[str]) -> dict[str, Any]:
        props = {f.name: self.field(f) for f in desc.fields if f.name not in exclude}
        return {"type": "object", "additionalProperties": False, "properties": props}

    def field(self, fd: FieldT) -> dict[str, Any]:
        if is_map(fd):
            value = fd.message_type.fields_by_name["value"]
            return {"type": "object", "additionalProperties": self.field_item(value)}
        if fd.is_repeated:
            return {"type": "array", "items": self.field_item(fd)}
        return self.field_item(fd)

    def field_item(self, fd: FieldT) -> dict[str, Any]:
        if fd.message_type is not None:
            return self.message(fd.message_type)
        if fd.type == FD.TYPE_ENUM:
            return {"type": "string", "enum": [v.name for v in fd.enum_type.values]}
        if fd.type in _SCALARS:
            return dict(_SCALARS[fd.type])
        schema: dict[str, Any] = {"type": "integer"}
        if fd.type in _UNSIGNED:
            schema["minimum"] = 0
        return schema


def _json(schema: dict[str, Any]) -> dict[str, Any]:
    return {"application/json": {"schema": schema}}


_NV_STATUS = {
    "NV-Status": {
        "description": "The outcome: a RequestStatus (code, msg, server_id, request_id) "
        "as one-line text protobuf",
        "schema": {"type": "string"},
    }
}


def _v1_responses(route: Route, binding: Binding) -> dict[str, Any]:
    """The legacy v1 API: status in the NV-Status header, protobuf bodies; the gateway's
    own refusals (restricted, unreachable service, body limit, ...) as everywhere."""
    errors: dict[str, Any] = {
        code: {"description": text, "content": _json(ERROR)}
        for code, text in ERROR_STATUSES.items()
        if code != "400"
    }
    errors["403"] = {"description": "A restricted API without its key", "content": _json(ERROR)}
    if route.rpc == "Infer":
        ok = {
            "description": "The raw outputs concatenated in NV-InferResponse order, then the "
            "whole InferResponseHeader (text protobuf; binary with ?format=binary)",
            "headers": {
                **_NV_STATUS,
                "NV-InferResponse": {
                    "description": "InferResponseHeader (one-line text protobuf)",
                    "schema": {"type": "string"},
                },
            },
            "content": {"application/octet-stream": {"schema": {"type": "string"}}},
        }
    elif binding.method == "GET" and route.rpc != "Health":
        ok = {
            "description": "Text protobuf by default; ?format=binary, or ?format=json "
            "(status only)",
            "headers": _NV_STATUS,
            "content": {
                "text/plain": {"schema": {"type": "string"}},
                "application/json": {"schema": {"type": "object"}},
                "application/octet-stream": {"schema": {"type": "string"}},
            },
        }
    else:
        ok = {"description": "Success (empty body)", "headers": _NV_STATUS}
    failed = {
        "description": "Failure: NV-Status carries the v1 code and message",
        "headers": _NV_STATUS,
    }
    return {"200": ok, "400": failed}


def _v1_parameters(route: Route, binding: Binding) -> list[dict[str, Any]]:
    params: list[dict[str, Any]] = []
    for name in binding.variables:
        fd = route.input_type.fields_by_name[name]
        schema: dict[str, Any] = {"type": "string"}
        if fd.type == FD.TYPE_INT64:
            schema = {"type": "integer", "minimum": 0}
        elif fd.type == FD.TYPE_ENUM:
            schema = {"type": "string", "enum": [v.name.lower() for v in fd.enum_type.values]}
        params.append({"name": name, "in": "path", "required": True, "schema": schema})
    if route.rpc == "Infer":
        params.append(
            {
                "name": "NV-InferRequest",
                "in": "header",
                "required": True,
                "description": "InferRequestHeader as text protobuf",
                "schema": {"type": "string"},
            }
        )
    if (route.rpc != "Health" and binding.method == "GET") or route.rpc == "Infer":
        params.append(
            {
                "name": "format",
                "in": "query",
                "required": False,
                "description": "text (the default, as is any other value), binary, or json "
                "(status only)",
                "schema": {"type": "string"},
            }
        )
    return params


def _responses(route: Route, binding: Binding, schemas: _Schemas) -> dict[str, Any]:
    if route.codec == hr.HTTP_CODEC_V1:
        return _v1_responses(route, binding)
    errors: dict[str, Any] = {
        code: {"description": text, "content": _json(ERROR)}
        for code, text in ERROR_STATUSES.items()
    }
    if route.codec == hr.HTTP_CODEC_STATUS:
        ok: dict[str, Any] = {"description": f"'{route.status_field}' is true (empty body)"}
        errors["400"] = {
            "description": f"'{route.status_field}' is false, or a bad request",
            "content": _json(ERROR),
        }
        return {"200": ok, **errors}
    if route.codec == hr.HTTP_CODEC_GENERATE:
        ok = {"description": "One response as a flat JSON object", "content": _json(GENERATED)}
        if binding.sse:
            ok = {
                "description": "Server-sent events: 'data: {...}' per response (an error "
                "ends the stream with 'data: {\"error\": ...}')",
                "content": {"text/event-stream": {"schema": {"type": "string"}}},
            }
        return {"200": ok, **errors}
    if route.codec == hr.HTTP_CODEC_INFER:
        ok = {
            "description": "Outputs as JSON, or JSON header + binary tensors "
            "(Inference-Header-Content-Length gives the JSON length)",
            "content": {
                **_json({"$ref": "#/components/schemas/InferResponse"}),
                "application/octet-stream": {"schema": {"type": "string", "format": "binary"}},
            },
        }
        return {"200": ok, **errors}
    output = route.output_type
    if not output.fields:
        return {"200": {"description": "Done (empty body)"}, **errors}
    if route.response_body:
        fd = output.fields_by_name[route.response_body]
        if is_map(fd) and route.map_values:
            item = schemas.field_item(fd.message_type.fields_by_name["value"])
            schema: dict[str, Any] = {"type": "array", "items": item}
        else:
            schema = schemas.field(fd)
    else:
        schema = schemas.message(output)
    return {"200": {"description": "OK", "content": _json(schema)}, **errors}


def _request_body(route: Route, binding: Binding, schemas: _Schemas) -> dict[str, Any] | None:
    if not binding.body:
        return None
    if route.codec == hr.HTTP_CODEC_V1:  # Infer: the inputs' raw bytes in header order
        return {
            "required": False,
            "content": {"application/octet-stream": {"schema": {"type": "string"}}},
        }
    if route.codec == hr.HTTP_CODEC_INFER:
        return {
            "required": True,
            "content": {
                **_json({"$ref": "#/components/schemas/InferRequest"}),
                "application/octet-stream": {"schema": {"type": "string", "format": "binary"}},
            },
        }
    if route.codec == hr.HTTP_CODEC_GENERATE:
        return {"required": False, "content": _json(GENERATE_REQUEST)}
    if binding.body == "*":
        schema = schemas.message(route.input_type, exclude=frozenset(binding.variables))
    else:
        schema = schemas.field(route.input_type.fields_by_name[binding.body])
    return {"required": False, "content": _json(schema)}


def openapi_document(routes: list[Route], version: str) -> dict[str, Any]:
    """The OpenAPI 3.0 document for every route's every binding."""
    schemas = _Schemas()
    paths: dict[str, dict[str, Any]] = {}
    for route in routes:
        for index, binding in enumerate(route.bindings):
            service = route.descriptor.containing_service.full_name
            v1 = route.codec == hr.HTTP_CODEC_V1
            operation: dict[str, Any] = {
                "operationId": ("v1_" if v1 else "") + route.rpc + (f"_{index}" if index else ""),
                "summary": f"{route.rpc} (gRPC {service}/{route.rpc})",
                "tags": [("v1 " if v1 else "") + route.rpc],
                "responses": _responses(route, binding, schemas),
            }
            if v1:
                operation["parameters"] = _v1_parameters(route, binding)
            elif binding.variables:
                operation["parameters"] = [
                    {"name": v, "in": "path", "required": True, "schema": {"type": "string"}}
                    for v in binding.variables
                ]
            body = _request_body(route, binding, schemas)
            if body is not None:
                operation["requestBody"] = body
            paths.setdefault(binding.template, {})[binding.method.lower()] = operation
    return {
        "openapi": "3.0.3",
        "info": {
            "title": "KServe v2 REST gateway",
            "version": version,
            "description": "Triton-compatible HTTP/REST API, served by translating each "
            "request into the gRPC call named in its summary; /api/... is the legacy v1 "
            "(TensorRT Inference Server) API.",
        },
        "paths": paths,
        "components": {"schemas": schemas.components},
    }


def docs_page(document: dict[str, Any]) -> bytes:
    """A self-contained HTML page listing every operation (no scripts, no CDN)."""
    rows = []
    for path, operations in document["paths"].items():
        for method, op in operations.items():
            codes = ", ".join(sorted(op["responses"]))
            rows.append(
                f"<tr><td class=m>{method.upper()}</td><td><code>{html.escape(path)}</code></td>"
                f"<td>{html.escape(op['tags'][0])}</td><td>{codes}</td></tr>"
            )
    title = html.escape(document["info"]["title"])
    return (
        "<!doctype html><html><head><meta charset=utf-8>"
        f"<title>{title}</title><style>"
        "body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:4px 8px;text-align:left}.m{font-weight:bold}"
        f"</style></head><body><h1>{title}</h1>"
        f"<p>{html.escape(document['info']['description'])} "
        'Machine-readable: <a href="/openapi.json">/openapi.json</a>.</p>'
        "<table><tr><th>Method</th><th>Path</th><th>RPC</th><th>Statuses</th></tr>"
        + "".join(rows)
        + "</table></body></html>"
    ).encode("utf-8")
