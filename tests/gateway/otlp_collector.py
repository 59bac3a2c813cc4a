"""A tiny OTLP/HTTP trace collector for tests: standard library only.

The client environment has no opentelemetry-proto (and its protobuf is 6, the service's
7), so ``ExportTraceServiceRequest`` is read with a protobuf wire-format walker and the
field numbers of opentelemetry/proto/trace/v1/trace.proto. Both processes under test
export here with ``--trace-config opentelemetry,url=<collector.url>``.
"""

from __future__ import annotations

import gzip
import struct
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

# Span.kind / Status.code values (trace.proto).
KIND_INTERNAL, KIND_SERVER, KIND_CLIENT = 1, 2, 3
STATUS_UNSET, STATUS_OK, STATUS_ERROR = 0, 1, 2


@dataclass
class Span:
    """One exported span; ids as lower-case hex, ``service`` from the resource."""

    service: str
    name: str
    trace_id: str
    span_id: str
    parent_id: str  # "" for a root span
    kind: int
    attributes: dict[str, Any] = field(default_factory=dict)
    status_code: int = STATUS_UNSET
    status_message: str = ""
    start_ns: int = 0
    end_ns: int = 0


def _varint(data: bytes, i: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        byte = data[i]
        i += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, i
        shift += 7


def _fields(data: bytes) -> Iterator[tuple[int, Any]]:
    """(field number, value): varints as int, fixed64 as int, length-delimited as bytes."""
    i = 0
    while i < len(data):
        key, i = _varint(data, i)
        number, wire = key >> 3, key & 7
        value: Any
        if wire == 0:
            value, i = _varint(data, i)
        elif wire == 1:
            value = struct.unpack_from("<Q", data, i)[0]
            i += 8
        elif wire == 2:
            length, i = _varint(data, i)
            value = data[i : i + length]
            i += length
        elif wire == 5:
            value = struct.unpack_from("<I", data, i)[0]
            i += 4
        else:
            raise ValueError(f"unsupported wire type {wire}")
        yield number, value


def _any_value(data: bytes) -> Any:
    for number, value in _fields(data):
        if number == 1:
            return value.decode()
        if number == 2:
            return bool(value)
        if number == 3:
            return value - (1 << 64) if value >= 1 << 63 else value
        if number == 4:
            return struct.unpack("<d", struct.pack("<Q", value))[0]
    return None


def _attributes(entries: list[bytes]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for entry in entries:
        key, value = "", None
        for number, item in _fields(entry):
            if number == 1:
                key = item.decode()
            elif number == 2:
                value = _any_value(item)
        out[key] = value
    return out


def _span(data: bytes, service: str) -> Span:
    span = Span(service, "", "", "", "", 0)
    attributes: list[bytes] = []
    for number, value in _fields(data):
        if number == 1:
            span.trace_id = value.hex()
        elif number == 2:
            span.span_id = value.hex()
        elif number == 4:
            span.parent_id = value.hex()
        elif number == 5:
            span.name = value.decode()
        elif number == 6:
            span.kind = value
        elif number == 7:
            span.start_ns = value
        elif number == 8:
            span.end_ns = value
        elif number == 9:
            attributes.append(value)
        elif number == 15:
            for part, item in _fields(value):
                if part == 2:
                    span.status_message = item.decode()
                elif part == 3:
                    span.status_code = item
    span.attributes = _attributes(attributes)
    return span


def decode_export(data: bytes) -> list[Span]:
    """The spans of one ExportTraceServiceRequest."""
    spans: list[Span] = []
    for number, resource_spans in _fields(data):
        if number != 1:
            continue
        service = ""
        scopes: list[bytes] = []
        for part, value in _fields(resource_spans):
            if part == 1:  # Resource
                resource = _attributes([v for n, v in _fields(value) if n == 1])
                service = str(resource.get("service.name", ""))
            elif part == 2:
                scopes.append(value)
        for scope in scopes:
            spans += [_span(v, service) for n, v in _fields(scope) if n == 2]
    return spans


class OtlpCollector:
    """Accepts ``POST /v1/traces`` (protobuf) on 127.0.0.1:<free port>; keeps the spans."""

    def __init__(self) -> None:
        self.spans: list[Span] = []
        self._lock = threading.Lock()
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                spans = decode_export(body)
                with collector._lock:
                    collector.spans += spans
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1/traces"

    def received(self) -> list[Span]:
        with self._lock:
            return list(self.spans)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)
