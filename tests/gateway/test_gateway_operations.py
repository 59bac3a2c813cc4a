"""The gateway's operations surface (issue 8): restricted APIs, TLS to the service and
HTTPS (with client certificates), trace-context propagation, and the SIGTERM drain.

A fake gRPC service runs in this process (tritonclient's copy of Triton's protos, so
nothing imports ``service``, ``gateway`` or ``inference``) and records every call's
metadata; the gateway is a real ``python -m gateway`` process in front of it.
"""

from __future__ import annotations

import datetime
import http.client
import ipaddress
import json
import signal
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest
from conftest import running_gateway
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from gateway_process import GatewayProcess, Reply, http_request
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc as pb_grpc

INFER_BODY = {"inputs": [{"name": "IN", "shape": [1], "datatype": "INT32", "data": [1]}]}
TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


class FakeService(pb_grpc.GRPCInferenceServiceServicer):
    """Answers the few RPCs the tests make; records (rpc, metadata) of each call.
    ModelInfer of model ``slow`` waits ``delay`` seconds (or until ``release`` is set)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, str]]] = []
        self.infer_started = threading.Event()
        self.release = threading.Event()
        self.delay = 0.0

    def _record(self, rpc: str, context: grpc.ServicerContext) -> None:
        self.calls.append((rpc, {k: str(v) for k, v in context.invocation_metadata()}))

    def rpcs(self) -> list[str]:
        return [rpc for rpc, _ in self.calls]

    def ServerLive(self, request: Any, context: grpc.ServicerContext) -> Any:
        self._record("ServerLive", context)
        return pb.ServerLiveResponse(live=True)

    def ServerReady(self, request: Any, context: grpc.ServicerContext) -> Any:
        self._record("ServerReady", context)
        return pb.ServerReadyResponse(ready=True)

    def ServerMetadata(self, request: Any, context: grpc.ServicerContext) -> Any:
        self._record("ServerMetadata", context)
        return pb.ServerMetadataResponse(name="fake", version="0")

    def ModelInfer(self, request: Any, context: grpc.ServicerContext) -> Any:
        self._record("ModelInfer", context)
        if request.model_name == "slow":
            self.infer_started.set()
            self.release.wait(self.delay)
        return pb.ModelInferResponse(model_name=request.model_name, model_version="1")


@pytest.fixture
def fake() -> Iterator[FakeService]:
    yield FakeService()


def _serve(fake: FakeService, credentials: grpc.ServerCredentials | None = None) -> Any:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    pb_grpc.add_GRPCInferenceServiceServicer_to_server(fake, server)
    if credentials is None:
        port = server.add_insecure_port("127.0.0.1:0")
    else:
        port = server.add_secure_port("127.0.0.1:0", credentials)
    server.start()
    return server, port


@pytest.fixture
def plain_service(fake: FakeService) -> Iterator[str]:
    server, port = _serve(fake)
    try:
        yield f"127.0.0.1:{port}"
    finally:
        fake.release.set()
        server.stop(None)


# --- restricted APIs ---------------------------------------------------------------------


def test_restricted_api_refuses_without_the_key_and_makes_no_rpc(
    fake: FakeService, plain_service: str
) -> None:
    args = ["--http-restricted-api", "health,inference:infer-key=s3cr3t-value"]
    with running_gateway(plain_service, args) as gw:
        expected = "This API is restricted, expecting header 'infer-key'"
        for headers in ({}, {"infer-key": "wrong"}, {"infer-key": "s3cr3t-valu"}):
            for method, path, body in (
                ("GET", "/v2/health/ready", None),
                ("GET", "/v2/health/live", None),
                ("POST", "/v2/models/m/infer", INFER_BODY),
            ):
                reply = http_request(gw.url, method, path, body, headers)
                assert reply.status == 403, reply
                assert reply.json() == {"error": expected}
        assert fake.calls == []  # refused before any RPC

        ok = {"infer-key": "s3cr3t-value"}
        assert http_request(gw.url, "GET", "/v2/health/ready", headers=ok).status == 200
        assert http_request(gw.url, "POST", "/v2/models/m/infer", INFER_BODY, ok).status == 200
        # metadata is not restricted: no key needed
        assert http_request(gw.url, "GET", "/v2").status == 200
        assert fake.rpcs() == ["ServerReady", "ModelInfer", "ServerMetadata"]
        # the key the caller presented goes on as the service's restricted-protocol key
        ready_md = fake.calls[0][1]
        assert ready_md["triton-grpc-protocol-infer-key"] == "s3cr3t-value"
    assert "s3cr3t" not in gw.log


def test_restricted_api_groups_with_separate_keys(fake: FakeService, plain_service: str) -> None:
    args = [
        "--http-restricted-api",
        "metadata:meta-key=m",
        "--http-restricted-api",
        "health:health-key=h",
    ]
    with running_gateway(plain_service, args) as gw:
        assert http_request(gw.url, "GET", "/v2", headers={"health-key": "h"}).status == 403
        assert http_request(gw.url, "GET", "/v2", headers={"meta-key": "m"}).status == 200
        ready = http_request(gw.url, "GET", "/v2/health/ready", headers={"meta-key": "m"})
        assert ready.error == "This API is restricted, expecting header 'health-key'"
        assert http_request(gw.url, "POST", "/v2/models/m/infer", INFER_BODY).status == 200


@pytest.mark.parametrize(
    "spec",
    ["health", "health:key", "nosuchgroup:k=v", ":k=v", "health:=v", "health:k="],
)
def test_bad_restricted_api_spec_stops_the_start(plain_service: str, spec: str) -> None:
    with pytest.raises(RuntimeError, match="--http-restricted-api"):
        GatewayProcess(plain_service, ["--http-restricted-api", spec]).start()


# --- trace context -----------------------------------------------------------------------


def test_trace_context_is_forwarded_as_grpc_metadata(fake: FakeService, plain_service: str) -> None:
    trace = {"traceparent": TRACEPARENT, "tracestate": "vendor=abc"}
    with running_gateway(plain_service) as gw:
        assert http_request(gw.url, "POST", "/v2/models/m/infer", INFER_BODY, trace).status == 200
        assert http_request(gw.url, "GET", "/v2/health/ready", headers=trace).status == 200
        assert http_request(gw.url, "GET", "/v2").status == 200
    (infer, infer_md), (ready, ready_md), (meta, meta_md) = fake.calls
    assert (infer, ready, meta) == ("ModelInfer", "ServerReady", "ServerMetadata")
    for md in (infer_md, ready_md):
        assert md["traceparent"] == TRACEPARENT
        assert md["tracestate"] == "vendor=abc"
    assert "traceparent" not in meta_md


# --- TLS -----------------------------------------------------------------------------------


class Pki:
    """A CA, a server certificate for localhost/127.0.0.1 and a client certificate."""

    def __init__(self, where: Path) -> None:
        self.dir = where
        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test CA")])
        ca = (
            self._builder(ca_name, ca_name, ca_key.public_key())
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(ca_key, hashes.SHA256())
        )
        self.ca = self._write("ca.pem", ca.public_bytes(serialization.Encoding.PEM))
        self.server_cert, self.server_key = self._leaf("server", ca, ca_key)
        self.client_cert, self.client_key = self._leaf("client", ca, ca_key)

    @staticmethod
    def _builder(subject: x509.Name, issuer: x509.Name, key: Any) -> x509.CertificateBuilder:
        now = datetime.datetime.now(datetime.UTC)
        return (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(issuer)
            .public_key(key)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
        )

    def _leaf(self, name: str, ca: x509.Certificate, ca_key: Any) -> tuple[Path, Path]:
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
        cert = (
            self._builder(subject, ca.subject, key.public_key())
            .add_extension(
                x509.SubjectAlternativeName(
                    [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
                ),
                critical=False,
            )
            .sign(ca_key, hashes.SHA256())
        )
        key_pem = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        return (
            self._write(f"{name}.pem", cert.public_bytes(serialization.Encoding.PEM)),
            self._write(f"{name}.key", key_pem),
        )

    def _write(self, name: str, data: bytes) -> Path:
        path = self.dir / name
        path.write_bytes(data)
        return path


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return Pki(tmp_path_factory.mktemp("pki"))


def _tls_service(fake: FakeService, pki: Pki, mutual: bool) -> tuple[Any, str]:
    credentials = grpc.ssl_server_credentials(
        [(pki.server_key.read_bytes(), pki.server_cert.read_bytes())],
        root_certificates=pki.ca.read_bytes() if mutual else None,
        require_client_auth=mutual,
    )
    server, port = _serve(fake, credentials)
    return server, f"localhost:{port}"


def test_tls_to_the_service(fake: FakeService, pki: Pki) -> None:
    server, target = _tls_service(fake, pki, mutual=False)
    try:
        args = ["--grpc-use-ssl", "--grpc-root-cert", str(pki.ca)]
        with running_gateway(target, args) as gw:
            assert http_request(gw.url, "GET", "/v2/health/ready").status == 200
        # A plaintext gateway cannot talk to it.
        with running_gateway(target) as gw:
            assert http_request(gw.url, "GET", "/v2/health/ready", timeout=30).status >= 500
    finally:
        server.stop(None)
    assert fake.rpcs() == ["ServerReady"]


def test_mutual_tls_to_the_service(fake: FakeService, pki: Pki) -> None:
    server, target = _tls_service(fake, pki, mutual=True)
    try:
        args = [
            "--grpc-use-ssl",
            "--grpc-root-cert",
            str(pki.ca),
            "--grpc-client-cert",
            str(pki.client_cert),
            "--grpc-client-key",
            str(pki.client_key),
        ]
        with running_gateway(target, args) as gw:
            assert http_request(gw.url, "POST", "/v2/models/m/infer", INFER_BODY).status == 200
        # Without a client certificate the handshake fails: the RPC never runs.
        with running_gateway(target, args[:3]) as gw:
            assert http_request(gw.url, "GET", "/v2/health/ready").status >= 500
    finally:
        server.stop(None)
    assert fake.rpcs() == ["ModelInfer"]


def test_https_serving(fake: FakeService, plain_service: str, pki: Pki) -> None:
    args = ["--https-cert", str(pki.server_cert), "--https-key", str(pki.server_key)]
    with running_gateway(plain_service, args) as gw:
        context = ssl.create_default_context(cafile=str(pki.ca))
        conn = http.client.HTTPSConnection("localhost", gw.port, context=context, timeout=10)
        try:
            conn.request("GET", "/v2/health/ready")
            assert conn.getresponse().status == 200
        finally:
            conn.close()
        # Plain HTTP on the HTTPS port gets no HTTP answer.
        with pytest.raises((http.client.HTTPException, OSError)):
            http_request(gw.url, "GET", "/v2/health/ready", timeout=5)


def _https_ready(port: int, context: ssl.SSLContext) -> int:
    """GET /v2/health/ready over HTTPS on a fresh connection; its HTTP status."""
    conn = http.client.HTTPSConnection("localhost", port, context=context, timeout=10)
    try:
        conn.request("GET", "/v2/health/ready")
        return conn.getresponse().status
    finally:
        conn.close()


def _client_context(pki: Pki, cert: tuple[Path, Path] | None = None) -> ssl.SSLContext:
    """Trusts ``pki``'s CA for the server; presents ``cert`` (chain, key) if given."""
    context = ssl.create_default_context(cafile=str(pki.ca))
    if cert is not None:
        context.load_cert_chain(*cert)
    return context


def _handshake(port: int, context: ssl.SSLContext) -> None:
    """A TLS 1.2 handshake alone: the server's verdict on the client certificate is part
    of the handshake itself (TLS 1.3 gives it only after the client believes it is done)."""
    context.maximum_version = ssl.TLSVersion.TLSv1_2
    with (
        socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname="localhost"),
    ):
        pass


def _refused(port: int, pki: Pki, cert: tuple[Path, Path] | None) -> None:
    """The handshake fails, and a request (TLS 1.3) gets no HTTP answer."""
    with pytest.raises(ssl.SSLError):
        _handshake(port, _client_context(pki, cert))
    with pytest.raises((ssl.SSLError, ConnectionResetError, BrokenPipeError)):
        _https_ready(port, _client_context(pki, cert))


def test_https_requires_client_certificates_from_the_ca(
    fake: FakeService, plain_service: str, pki: Pki, tmp_path: Path
) -> None:
    other = Pki(tmp_path)  # another CA, with its own client certificate
    args = ["--https-cert", str(pki.server_cert), "--https-key", str(pki.server_key)]
    args += ["--https-root-cert", str(pki.ca), "--https-require-client-cert"]
    with running_gateway(plain_service, args) as gw:
        assert "(HTTPS, client certificates required)" in gw.log
        signed = _client_context(pki, (pki.client_cert, pki.client_key))
        assert _https_ready(gw.port, signed) == 200
        _handshake(gw.port, _client_context(pki, (pki.client_cert, pki.client_key)))
        _refused(gw.port, pki, None)  # no client certificate
        _refused(gw.port, pki, (other.client_cert, other.client_key))
        # Refused handshakes leave the gateway serving.
        assert _https_ready(gw.port, signed) == 200
    assert fake.rpcs() == ["ServerReady", "ServerReady"]  # the refused ones reached no RPC


def test_https_root_cert_alone_verifies_presented_certificates(
    fake: FakeService, plain_service: str, pki: Pki, tmp_path: Path
) -> None:
    other = Pki(tmp_path)
    args = ["--https-cert", str(pki.server_cert), "--https-key", str(pki.server_key)]
    args += ["--https-root-cert", str(pki.ca)]
    with running_gateway(plain_service, args) as gw:
        assert _https_ready(gw.port, _client_context(pki)) == 200  # none presented: served
        signed = _client_context(pki, (pki.client_cert, pki.client_key))
        assert _https_ready(gw.port, signed) == 200
        _refused(gw.port, pki, (other.client_cert, other.client_key))
        assert _https_ready(gw.port, signed) == 200
    assert fake.rpcs() == ["ServerReady"] * 3


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--https-require-client-cert"], "--https-require-client-cert needs --https-root-cert"),
        (["--https-root-cert", "{ca}"], "--https-root-cert needs --https-cert and --https-key"),
        (
            ["--https-cert", "{cert}", "--https-key", "{key}", "--https-require-client-cert"],
            "--https-require-client-cert needs --https-root-cert",
        ),
        (
            ["--https-cert", "{cert}", "--https-key", "{key}", "--https-root-cert", "{missing}"],
            "--https-root-cert: no such file",
        ),
    ],
)
def test_incomplete_client_certificate_flags_exit_2(
    plain_service: str, pki: Pki, tmp_path: Path, extra: list[str], message: str
) -> None:
    names = {"ca": pki.ca, "cert": pki.server_cert, "key": pki.server_key}
    names["missing"] = tmp_path / "missing.pem"
    args = [arg.format(**names) for arg in extra]
    with pytest.raises(RuntimeError, match="gateway exited with 2") as stopped:
        GatewayProcess(plain_service, args).start()
    assert message in str(stopped.value)


def test_tls_flag_errors(plain_service: str, pki: Pki, tmp_path: Path) -> None:
    for args in (
        ["--grpc-root-cert", str(pki.ca)],  # without --grpc-use-ssl
        ["--grpc-use-ssl", "--grpc-client-cert", str(pki.client_cert)],  # no key
        ["--grpc-use-ssl", "--grpc-root-cert", str(tmp_path / "missing.pem")],
        ["--https-cert", str(pki.server_cert)],  # no key
    ):
        with pytest.raises(RuntimeError, match="gateway exited with 2"):
            GatewayProcess(plain_service, args).start()


# --- SIGTERM -------------------------------------------------------------------------------


def _in_thread(fn: Any) -> tuple[threading.Thread, list[Any]]:
    out: list[Any] = []
    thread = threading.Thread(target=lambda: out.append(fn()), daemon=True)
    thread.start()
    return thread, out


def _on(conn: http.client.HTTPConnection, method: str, path: str, body: Any = None) -> Reply:
    """One request on an open keep-alive connection."""
    data = json.dumps(body) if body is not None else None
    conn.request(method, path, body=data)
    response = conn.getresponse()
    payload = response.read()
    return Reply(response.status, {k.lower(): v for k, v in response.getheaders()}, payload)


def test_sigterm_serves_open_connections_until_they_close(
    fake: FakeService, plain_service: str
) -> None:
    """Triton's HTTP stop: new connections refused, everything on the open ones served
    (readiness asked of the service, inferences made) while the exit timeout counts down
    once a second in the log; the gateway exits once the last connection has closed."""
    fake.delay = 30.0
    gw = GatewayProcess(plain_service, ["--exit-timeout-secs", "20"]).start()
    try:
        assert http_request(gw.url, "GET", "/v2/health/ready").status == 200
        thread, out = _in_thread(
            lambda: http_request(gw.url, "POST", "/v2/models/slow/infer", INFER_BODY)
        )
        assert fake.infer_started.wait(10)
        kept = http.client.HTTPConnection(*gw.url.rsplit(":", 1), timeout=5)
        kept.request("GET", "/v2/health/live")  # a keep-alive connection open before SIGTERM
        assert kept.getresponse().read() == b""
        gw.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        # New connections are refused (a balancer moves to another replica).
        with pytest.raises(ConnectionRefusedError):
            http_request(gw.url, "GET", "/v2/health/live", timeout=5)
        time.sleep(1.0)
        # On the open connection, as before the signal: readiness is the service's.
        before = len(fake.calls)
        assert _on(kept, "GET", "/v2/health/ready").status == 200
        assert len(fake.calls) == before + 1
        kept.close()
        fake.release.set()  # the in-flight request finishes; its connection closes
        thread.join(10)
        reply: Reply = out[0]
        assert reply.status == 200, reply
        assert gw.wait(10) == 0
    finally:
        gw.kill()
    log = gw.log
    assert "Timeout 20: Found 2 HTTP service connections" in log, log
    assert "Timeout 19: Found " in log, log
    assert fake.rpcs().count("ModelInfer") == 1


def _answer_or_closed(url: str) -> Reply | None:
    """The slow model's answer; None when the connection closed without one."""
    try:
        return http_request(url, "POST", "/v2/models/slow/infer", INFER_BODY)
    except http.client.RemoteDisconnected:
        return None


def test_sigterm_exit_timeout_bounds_the_wait(fake: FakeService, plain_service: str) -> None:
    fake.delay = 60.0
    gw = GatewayProcess(plain_service, ["--exit-timeout-secs", "1"]).start()
    try:
        thread, out = _in_thread(lambda: _answer_or_closed(gw.url))
        assert fake.infer_started.wait(10)
        started = time.monotonic()
        gw.send_signal(signal.SIGTERM)
        assert gw.wait(10) == 1  # it cut a request off: work left, as Triton (decision 056)
        assert time.monotonic() - started < 4
        assert "Exit timeout: 1 request(s) still in flight" in gw.log
        thread.join(10)
        assert not thread.is_alive()
        assert out == [None]  # closed without an answer, as Triton closes it
    finally:
        gw.kill()
        fake.release.set()


# --- with the real service -------------------------------------------------------------------


def test_one_key_guards_both_hops_of_the_real_service() -> None:
    """The service restricts metadata; the gateway requires the same key of REST callers
    and forwards it, so a caller with the key passes both and one without stops at 403."""
    from server_process import ServerProcess

    restricted = ["--grpc-restricted-protocol=metadata:api-key=k1"]
    with ServerProcess(extra_args=restricted) as service:
        with running_gateway(service.url, ["--http-restricted-api=metadata:api-key=k1"]) as gw:
            assert http_request(gw.url, "GET", "/v2").status == 403
            reply = http_request(gw.url, "GET", "/v2", headers={"api-key": "k1"})
            assert reply.status == 200, reply
            assert reply.json()["name"]
            # Unrestricted on both hops: no key needed.
            assert http_request(gw.url, "GET", "/v2/health/ready").status == 200
        # A gateway without the flag lets the call through; the service refuses it (only
        # configured keys are forwarded).
        with running_gateway(service.url) as gw:
            refused = http_request(gw.url, "GET", "/v2", headers={"api-key": "k1"})
            assert refused.status >= 400, refused
            assert "This protocol is restricted" in refused.error
