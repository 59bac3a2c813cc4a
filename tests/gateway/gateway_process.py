"""Start the REST gateway (``python -m gateway``) as a subprocess on a free loopback port.

Standard library only, like tests/server_process.py: client-environment tests must not
import ``gateway`` (it needs the server's protobuf). The gateway binds port 0 and logs
``Started HTTPService at HOST:PORT``; the port is read from that line.
"""

from __future__ import annotations

import http.client
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from server_process import LOCAL_SOCKETS, SERVICE_PYTHON, LoggedProcess

_STARTED = re.compile(r"Started HTTPService at [^\s:]+:(\d+)")


class GatewayProcess(LoggedProcess):
    """``python -m gateway --grpc-target TARGET`` with its stderr collected."""

    name = "gateway"
    started = _STARTED

    def __init__(
        self,
        grpc_target: str,
        extra_args: Sequence[str] = (),
        env: dict[str, str] | None = None,
    ) -> None:
        server = LOCAL_SOCKETS.get(grpc_target)
        local = server.local_socket if server is not None and server.running else ""
        if local and not any(a.startswith("--grpc-local-socket") for a in extra_args):
            extra_args = ["--grpc-local-socket", local, *extra_args]
        super().__init__(
            [
                SERVICE_PYTHON,
                "-m",
                "gateway",
                "--grpc-target",
                grpc_target,
                "--http-address",
                "127.0.0.1",
                "--http-port",
                "0",
                *extra_args,
            ],
            env,
        )

    def start(self, timeout: float = 30.0) -> GatewayProcess:
        return super().start(timeout)


class Reply:
    """A raw HTTP answer: status, headers (lower-case names) and body."""

    def __init__(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.status = status
        self.headers = headers
        self.body = body

    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def error(self) -> str:
        doc = self.json()
        assert set(doc) == {"error"}, doc
        return str(doc["error"])

    def __repr__(self) -> str:
        return f"Reply({self.status}, {self.body[:300]!r})"


def http_request(
    url: str,
    method: str,
    path: str,
    body: bytes | str | Any = None,
    headers: Mapping[str, str] | None = None,
    timeout: float = 30.0,
) -> Reply:
    """One request on a fresh connection; a dict or list body is sent as JSON."""
    if body is not None and not isinstance(body, bytes | str):
        body = json.dumps(body)
    host, port = url.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=timeout)
    try:
        conn.request(method, path, body=body, headers=dict(headers or {}))
        response = conn.getresponse()
        data = response.read()
        return Reply(response.status, {k.lower(): v for k, v in response.getheaders()}, data)
    finally:
        conn.close()
