"""LogSettings / TraceSetting messages <-> plain dicts that the telemetry package reads."""

from __future__ import annotations

from collections.abc import Mapping

from inference import grpc_service_pb2 as pb

from ..telemetry.logs import LogValue

__all__ = [
    "decode_log_settings",
    "decode_trace_settings",
    "encode_log_settings",
    "encode_trace_settings",
]


def decode_log_settings(request: pb.LogSettingsRequest) -> dict[str, LogValue | None]:
    """A setting whose value has no type set decodes to None (refused as mistyped)."""
    out: dict[str, LogValue | None] = {}
    for name, value in request.settings.items():
        which = value.WhichOneof("parameter_choice")
        out[name] = getattr(value, which) if which is not None else None
    return out


def encode_log_settings(settings: Mapping[str, LogValue]) -> pb.LogSettingsResponse:
    response = pb.LogSettingsResponse()
    for name, value in settings.items():
        slot = response.settings[name]
        if isinstance(value, bool):
            slot.bool_param = value
        elif isinstance(value, int):
            slot.uint32_param = value
        else:
            slot.string_param = value
    return response


def decode_trace_settings(request: pb.TraceSettingRequest) -> dict[str, list[str]]:
    return {name: list(value.value) for name, value in request.settings.items()}


def encode_trace_settings(settings: Mapping[str, list[str]]) -> pb.TraceSettingResponse:
    response = pb.TraceSettingResponse()
    for name, values in settings.items():
        response.settings[name].value.extend(values)
    return response
