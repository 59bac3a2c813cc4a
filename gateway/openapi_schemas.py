"""Hand-written parts of the OpenAPI document: v2 inference and generate bodies (their
JSON is not the proto's) and the error answers every route can give."""

from __future__ import annotations

from typing import Any

__all__ = [
    "ERROR",
    "ERROR_STATUSES",
    "GENERATED",
    "GENERATE_REQUEST",
    "INFER_SCHEMAS",
    "PARAMETER_VALUE",
]

#: Error answers any route can give, with the gRPC codes behind them (gateway/errors.py).
ERROR_STATUSES: dict[str, str] = {
    "400": "Bad request: malformed JSON, wrong types, unknown fields; or INVALID_ARGUMENT, "
    "ALREADY_EXISTS, CANCELLED, UNKNOWN from the service",
    "404": "NOT_FOUND: unknown model or version",
    "413": "The body exceeds --http-max-body-bytes",
    "415": "Unsupported Content-Encoding",
    "500": "INTERNAL from the service",
    "501": "UNIMPLEMENTED by the service",
    "503": "UNAVAILABLE: the service is unreachable, shutting down, or the model is not ready",
}

ERROR = {"$ref": "#/components/schemas/Error"}
PARAMETER_VALUE = {"anyOf": [{"type": "boolean"}, {"type": "number"}, {"type": "string"}]}
_TENSOR_DATA = {
    "type": "array",
    "description": "Row-major values, flat or nested; strings for BYTES",
    "items": {},
}
_GENERATE_VALUE = {
    "anyOf": [
        {"type": "boolean"},
        {"type": "number"},
        {"type": "string"},
        {
            "type": "array",
            "items": {"anyOf": [{"type": "boolean"}, {"type": "number"}, {"type": "string"}]},
        },
    ]
}
GENERATE_REQUEST = {
    "type": "object",
    "description": "Keys naming model inputs are tensors (a value or a 1-D array); "
    "the others are request parameters",
    "additionalProperties": _GENERATE_VALUE,
}
GENERATED = {
    "type": "object",
    "required": ["model_name", "model_version"],
    "properties": {"model_name": {"type": "string"}, "model_version": {"type": "string"}},
}
INFER_SCHEMAS: dict[str, Any] = {
    "InferParameters": {"type": "object", "additionalProperties": PARAMETER_VALUE},
    "InferInput": {
        "type": "object",
        "required": ["name", "shape", "datatype"],
        "additionalProperties": False,
        "properties": {
            "name": {"type": "string"},
            "shape": {"type": "array", "items": {"type": "integer", "minimum": 0}},
            "datatype": {"type": "string"},
            "parameters": {"$ref": "#/components/schemas/InferParameters"},
            "data": _TENSOR_DATA,
        },
    },
    "InferRequestedOutput": {
        "type": "object",
        "required": ["name"],
        "additionalProperties": False,
        "properties": {
            "name": {"type": "string"},
            "parameters": {"$ref": "#/components/schemas/InferParameters"},
        },
    },
    "InferRequest": {
        "type": "object",
        "required": ["inputs"],
        "additionalProperties": False,
        "properties": {
            "id": {"type": "string"},
            "parameters": {"$ref": "#/components/schemas/InferParameters"},
            "inputs": {"type": "array", "items": {"$ref": "#/components/schemas/InferInput"}},
            "outputs": {
                "type": "array",
                "items": {"$ref": "#/components/schemas/InferRequestedOutput"},
            },
        },
    },
    "InferOutput": {
        "type": "object",
        "required": ["name", "datatype", "shape"],
        "properties": {
            "name": {"type": "string"},
            "datatype": {"type": "string"},
            "shape": {"type": "array", "items": {"type": "integer"}},
            "parameters": {"$ref": "#/components/schemas/InferParameters"},
            "data": _TENSOR_DATA,
        },
    },
    "InferResponse": {
        "type": "object",
        "required": ["model_name", "model_version", "outputs"],
        "properties": {
            "id": {"type": "string"},
            "model_name": {"type": "string"},
            "model_version": {"type": "string"},
            "parameters": {"$ref": "#/components/schemas/InferParameters"},
            "outputs": {"type": "array", "items": {"$ref": "#/components/schemas/InferOutput"}},
        },
    },
    "Error": {
        "type": "object",
        "required": ["error"],
        "properties": {"error": {"type": "string"}},
    },
}
